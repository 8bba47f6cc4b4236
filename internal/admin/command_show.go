package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// `show <source> <key>`: a key's state, its event's attempts and its
// archived events, each with its attempts (docs/operating.md#commands).

// printHistory writes h's attempts, one line each, indented; whole adds
// each answer's headers and body below its line.
func printHistory(w io.Writer, h *event.HistoryView, indent string, whole bool) {
	if h == nil || h.Total == 0 {
		return
	}
	if h.Total > len(h.Attempts) {
		fmt.Fprintf(w, "%s(the last %d of %d attempts)\n", indent, len(h.Attempts), h.Total)
	}
	for _, a := range h.Attempts {
		outcome := fmt.Sprintf("%3d", a.Status)
		if a.Status == 0 {
			outcome = "  -"
		}
		fmt.Fprintf(w, "%sattempt %d  %s  %s  %8.1fms  %s", indent, a.Attempt, a.At.Format(time.RFC3339Nano), outcome, a.LatencyMs, a.Destination)
		if a.Error != "" {
			fmt.Fprintf(w, "  error: %s", a.Error)
		}
		fmt.Fprintln(w)
		if !whole {
			continue
		}
		names := make([]string, 0, len(a.Headers))
		for name := range a.Headers {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			for _, v := range a.Headers[name] {
				fmt.Fprintf(w, "%s    %s: %s\n", indent, name, v)
			}
		}
		if a.Body != nil {
			body := *a.Body
			if a.BodyEncoding != "" {
				body = "(" + a.BodyEncoding + ") " + body
			}
			fmt.Fprintf(w, "%s    %s\n", indent, strings.ReplaceAll(body, "\n", "\n"+indent+"    "))
		}
		if a.Truncated {
			fmt.Fprintf(w, "%s    (the answer was longer: keep_response kept this much)\n", indent)
		}
	}
}

// showEvents is the most archived events show prints whole.
const showEvents = 10

// cmdShow prints a key's state, its inbox event's attempts, and the
// newest archived events of the key with their attempts.
func cmdShow(fl caddycmd.Flags) (int, error) {
	source, key, err := twoArgs(fl)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if err := show(fl, os.Stdout, source, key); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	return caddy.ExitCodeSuccess, nil
}

func show(fl caddycmd.Flags, w io.Writer, source, key string) error {
	body, err := adminRequest(fl, http.MethodGet, keyPath(source, key))
	if err != nil {
		return err
	}
	var st struct {
		State      string             `json:"state"`
		Status     int                `json:"status"`
		RecordedAt *time.Time         `json:"recorded_at"`
		ExpiresAt  *time.Time         `json:"expires_at"`
		History    *event.HistoryView `json:"history"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("the admin API answered %q: %v", body, err)
	}
	fmt.Fprintf(w, "key %s of source %s: %s", key, source, strings.ReplaceAll(st.State, "_", " "))
	if st.State == "completed" {
		fmt.Fprintf(w, ", status %d", st.Status)
		if st.RecordedAt != nil && st.ExpiresAt != nil {
			fmt.Fprintf(w, ", recorded %s, expires %s", st.RecordedAt.Format(time.RFC3339), st.ExpiresAt.Format(time.RFC3339))
		}
	}
	fmt.Fprintln(w)
	if st.History != nil {
		fmt.Fprintln(w, "inbox attempts:")
		printHistory(w, st.History, "  ", true)
	}
	body, err = adminRequest(fl, http.MethodGet, sourcePath(source))
	if err != nil {
		return err
	}
	var src struct {
		Archive *struct{} `json:"archive"`
	}
	if err := json.Unmarshal(body, &src); err != nil {
		return fmt.Errorf("the admin API answered %q: %v", body, err)
	}
	if src.Archive == nil {
		return nil // the source keeps no archive: the key's state is all there is
	}
	q := url.Values{"key": {key}, "count": {fmt.Sprint(showEvents)}}
	body, err = adminRequest(fl, http.MethodGet, sourcePath(source, "events")+"?"+q.Encode())
	if err != nil {
		return err
	}
	var list struct {
		Events []tailEvent `json:"events"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("the admin API answered %q: %v", body, err)
	}
	if len(list.Events) == 0 {
		fmt.Fprintln(w, "no archived event")
		return nil
	}
	fmt.Fprintln(w, "archived events, newest first:")
	for _, ev := range list.Events {
		printEventLine(w, ev)
		if ev.History == nil || st.History != nil && ev.Result == "new" {
			continue // none, or the inbox's, printed above
		}
		body, err := adminRequest(fl, http.MethodGet, sourcePath(source, "events", url.PathEscape(ev.ID)))
		if err != nil {
			return err
		}
		var whole tailEvent
		if err := json.Unmarshal(body, &whole); err != nil {
			return fmt.Errorf("the admin API answered %q: %v", body, err)
		}
		printHistory(w, whole.History, "    ", true)
	}
	return nil
}

// printEventLine writes an archived event's line, as tail does.
func printEventLine(w io.Writer, ev tailEvent) {
	fmt.Fprintf(w, "%s  %-17s %3d  %8.1fms  %s %s  %s  %s\n", ev.Received.Format(time.RFC3339Nano), ev.Result, ev.Status,
		ev.DurationMs, ev.Method, ev.URI, ev.Key, ev.ID)
}

// newShowCommand is the show command.
func newShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <source> <key>",
		Short: "Shows a key's state and every attempt of its event, with the application's answers",
		Long: `
Shows what is known of a key of a source through the admin API: its state
(GET /webhook_idempotency/<source>/keys?key=<key>), its inbox event's
attempts, and the newest archived events of the key
(GET /webhook_idempotency/<source>/events?key=<key>), each with its
attempts: when, the destination, the status (or the error of an attempt
that got no answer), the latency, and what keep_response kept of the
application's answer, its headers and body. <key> is the resolved key
value, as in {http.webhook_idempotency.key}.
`,
		RunE: commandFunc(cmdShow),
	}
	adminFlags(cmd)
	return cmd
}
