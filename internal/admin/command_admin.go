package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// The admin API from the command line (docs/admin.md): a key's state,
// forgetting a key, and the archive's newest events, followed as they
// come. They call the admin endpoint of a running Caddy, found as
// `caddy reload` finds it: --address, else the admin address of --config,
// else localhost:2019.

// adminFlags adds the flags that find the admin endpoint.
func adminFlags(cmd *cobra.Command) {
	cmd.Flags().String("address", "", "The admin endpoint's address (default: from --config, else localhost:2019)")
	cmd.Flags().StringP("config", "c", "", "A configuration file whose admin address to use")
	cmd.Flags().StringP("adapter", "a", "", "The adapter of --config")
}

// adminRequest calls the admin API at the path and returns the answer's body;
// an error answer becomes an error that says what the API said.
func adminRequest(fl caddycmd.Flags, method, path string) ([]byte, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return nil, fmt.Errorf("finding the admin endpoint: %v", err)
	}
	resp, err := caddycmd.AdminAPIRequest(addr, method, path, nil, nil)
	if err != nil {
		return nil, adminError(err)
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// adminError turns AdminAPIRequest's error, which quotes the answer, into
// the API's own message when it has one.
func adminError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, `{"error":`); i >= 0 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(msg[i:]), &e) == nil && e.Error != "" {
			status := ""
			if j := strings.Index(msg, "HTTP "); j >= 0 && j < i {
				status = strings.TrimRight(msg[j:i], ": ") + ": "
			}
			return errors.New(status + e.Error)
		}
	}
	return err
}

// sourcePath is the admin API path of a source's route.
func sourcePath(source string, rest ...string) string {
	p := adminPrefix + url.PathEscape(source)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// keyPath is the admin API path of a key: in the query, where any key
// fits (a path segment `.` or `..` would be cleaned away).
func keyPath(source, key string) string {
	return sourcePath(source, "keys") + "?" + url.Values{"key": {key}}.Encode()
}

// twoArgs reads the <source> <key> arguments.
func twoArgs(fl caddycmd.Flags) (string, string, error) {
	if fl.NArg() != 2 || fl.Arg(0) == "" || fl.Arg(1) == "" {
		return "", "", errors.New("want <source> <key>: the route's source and the resolved key value (as in {http.webhook_idempotency.key})")
	}
	return fl.Arg(0), fl.Arg(1), nil
}

// cmdKey prints a key's state.
func cmdKey(fl caddycmd.Flags) (int, error) {
	source, key, err := twoArgs(fl)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	body, err := adminRequest(fl, http.MethodGet, keyPath(source, key))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, body, "", "  "); err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("the admin API answered %q: %v", body, err)
	}
	fmt.Println(out.String())
	return caddy.ExitCodeSuccess, nil
}

// cmdForget forgets a key.
func cmdForget(fl caddycmd.Flags) (int, error) {
	source, key, err := twoArgs(fl)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if _, err := adminRequest(fl, http.MethodDelete, keyPath(source, key)); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	fmt.Printf("forgot key %s of source %s: the provider's next retry of it is processed\n", key, source)
	return caddy.ExitCodeSuccess, nil
}

// cmdPause pauses a source's deliveries, or one destination's.
func cmdPause(fl caddycmd.Flags) (int, error) { return pauseCommand(fl, "pause") }

// cmdResume resumes them.
func cmdResume(fl caddycmd.Flags) (int, error) { return pauseCommand(fl, "resume") }

// pauseCommand runs pause or resume through the admin API.
func pauseCommand(fl caddycmd.Flags, op string) (int, error) {
	if fl.NArg() != 1 || fl.Arg(0) == "" {
		return caddy.ExitCodeFailedStartup, errors.New("want <source>: the route's source")
	}
	source, dest := fl.Arg(0), fl.String("destination")
	path := sourcePath(source, op)
	if dest != "" {
		path += "?" + url.Values{"destination": {dest}}.Encode()
	}
	if _, err := adminRequest(fl, http.MethodPost, path); err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	what := "deliveries of source " + source
	if dest != "" {
		what = "deliveries of source " + source + " to " + dest
	}
	if op == "pause" {
		fmt.Printf("paused %s: events are still accepted, and wait\n", what)
	} else {
		fmt.Printf("resumed %s\n", what)
	}
	return caddy.ExitCodeSuccess, nil
}

// tailEvent is what tail reads of an archived event.
type tailEvent struct {
	ID         string             `json:"id"`
	Received   time.Time          `json:"received"`
	Key        string             `json:"key"`
	Result     string             `json:"result"`
	Status     int                `json:"status"`
	DurationMs float64            `json:"duration_ms"`
	Method     string             `json:"method"`
	URI        string             `json:"uri"`
	Remote     string             `json:"remote"`
	Reason     string             `json:"reason"`
	History    *event.HistoryView `json:"history"`
}

// eventIDLess orders archive event ids, `<ms>-<seq>`.
func eventIDLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	an, _ := strconv.ParseUint(am, 10, 64)
	bn, _ := strconv.ParseUint(bm, 10, 64)
	if an != bn {
		return an < bn
	}
	ai, _ := strconv.ParseUint(as, 10, 64)
	bi, _ := strconv.ParseUint(bs, 10, 64)
	return ai < bi
}

// cmdTail prints a source's newest archived events, oldest first, and
// with --follow the events archived after them as they come.
func cmdTail(fl caddycmd.Flags) (int, error) {
	if fl.NArg() != 1 || fl.Arg(0) == "" {
		return caddy.ExitCodeFailedStartup, errors.New("want <source>: the route's source")
	}
	source := fl.Arg(0)
	count := fl.Int("count")
	if count < 1 || count > maxArchiveCount {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("--count %d: want 1 to %d", count, maxArchiveCount)
	}
	q := url.Values{}
	for _, name := range []string{"key", "result", "status"} {
		if v := fl.String(name); v != "" {
			q.Set(name, v)
		}
	}
	asJSON, follow, every, refused := fl.Bool("json"), fl.Bool("follow"), fl.Duration("interval"), fl.Bool("refused")
	if every <= 0 {
		every = time.Second
	}
	last := ""
	for first := true; ; first = false {
		q.Set("count", strconv.Itoa(count))
		if !first {
			q.Set("count", strconv.Itoa(maxArchiveCount))
		}
		what := "events"
		if refused {
			what = "refused"
		}
		body, err := adminRequest(fl, http.MethodGet, sourcePath(source, what)+"?"+q.Encode())
		if err != nil {
			return caddy.ExitCodeFailedStartup, err
		}
		var list struct {
			Events  []json.RawMessage `json:"events"`
			Refused []json.RawMessage `json:"refused"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return caddy.ExitCodeFailedStartup, fmt.Errorf("the admin API answered %q: %v", body, err)
		}
		if refused {
			list.Events = list.Refused
		}
		// newest first: print the new ones oldest first
		slices.Reverse(list.Events)
		for _, raw := range list.Events {
			var ev tailEvent
			if err := json.Unmarshal(raw, &ev); err != nil {
				return caddy.ExitCodeFailedStartup, err
			}
			if last != "" && !eventIDLess(last, ev.ID) {
				continue
			}
			last = ev.ID
			if asJSON {
				fmt.Println(string(raw))
				continue
			}
			if refused {
				fmt.Printf("%s  %-17s %3d  %s %s  from %s  %s  id %s\n", ev.Received.Format(time.RFC3339Nano), ev.Result, ev.Status,
					ev.Method, ev.URI, ev.Remote, ev.Reason, ev.Key)
				continue
			}
			printEventLine(os.Stdout, ev)
			printHistory(os.Stdout, ev.History, "    ", false)
		}
		if !follow {
			return caddy.ExitCodeSuccess, nil
		}
		_ = os.Stdout.Sync()
		time.Sleep(every)
	}
}

// newAdminCommands are the key, forget, tail, pause and resume commands.
func newAdminCommands() []*cobra.Command {
	key := &cobra.Command{
		Use:   "key <source> <key>",
		Short: "Shows a key's state: absent, in flight or completed",
		Long: `
Shows the state of a key of a source through the admin API
(GET /webhook_idempotency/<source>/keys/<key>): absent, in flight (with the
lease left) or completed (with the recorded status, when it was recorded
and when it expires). <key> is the resolved key value, as in
{http.webhook_idempotency.key}: the event id, or sha256:<hex> of a body.
`,
		RunE: commandFunc(cmdKey),
	}
	forget := &cobra.Command{
		Use:   "forget <source> <key>",
		Short: "Forgets a completed key, so that the provider's next retry is processed",
		Long: `
Forgets a completed key through the admin API
(DELETE /webhook_idempotency/<source>/keys/<key>), so that the provider's
next retry of it reaches the application. A key in flight cannot be
forgotten (its delivery is being processed); an absent one is an error.
`,
		RunE: commandFunc(cmdForget),
	}
	tail := &cobra.Command{
		Use:   "tail <source> [--count <n>] [--follow] [--result <r>] [--status <s>] [--key <k>] [--json] [--refused]",
		Short: "Prints the newest archived events of a source, and follows new ones",
		Long: `
Prints the newest events of a source's archive through the admin API
(GET /webhook_idempotency/<source>/events), oldest first, one line each:
when received, result, status, handling time, request line, key and event
id, and below it a line for each attempt of the event as known then: when,
the status (or the error of an attempt that got no answer), the latency
and the destination (show <source> <key> adds the application's
answers). With --follow it then polls for new events (every --interval)
and prints them as they are archived. --json prints each event as the API
answers it, one JSON object per line. The route needs an archive.

With --refused it prints the source's refused requests instead
(GET /webhook_idempotency/<source>/refused), every route keeps them: when,
result, status, request line, client address, the reason and the
provider's delivery id.
`,
		RunE: commandFunc(cmdTail),
	}
	f := tail.Flags()
	f.Int("count", 20, "How many of the newest events to print first")
	f.BoolP("follow", "f", false, "Keep printing events as they are archived")
	f.Duration("interval", time.Second, "How often --follow polls")
	f.String("result", "", "Only events of this result (new, replayed, …)")
	f.String("status", "", "Only events answered with this status or class (5xx)")
	f.String("key", "", "Only events of this key")
	f.Bool("json", false, "Print the events as JSON, one per line")
	f.Bool("refused", false, "Print the source's refused requests (why each was refused) instead of its archive")
	pause := &cobra.Command{
		Use:   "pause <source> [--destination <url>]",
		Short: "Pauses the inbox deliveries of a source, or of one destination",
		Long: `
Pauses the inbox deliveries of a source through the admin API
(POST /webhook_idempotency/<source>/pause), or with --destination those to
one destination (its URL, or its id as GET /webhook_idempotency/<source>/inbox
lists it). Events are still accepted (202) and wait; the pause is kept in
the route's store, across restarts and reloads, and every instance on one
Redis follows it within a second. Deliveries in progress finish.
`,
		RunE: commandFunc(cmdPause),
	}
	resume := &cobra.Command{
		Use:   "resume <source> [--destination <url>]",
		Short: "Resumes the inbox deliveries of a source, or of one destination",
		Long: `
Resumes the inbox deliveries of a source through the admin API
(POST /webhook_idempotency/<source>/resume), or with --destination those to
one destination. A destination paused by itself stays paused when its source
is resumed, and the other way round.
`,
		RunE: commandFunc(cmdResume),
	}
	for _, c := range []*cobra.Command{pause, resume} {
		c.Flags().String("destination", "", "One destination: its URL or its id")
	}
	for _, c := range []*cobra.Command{key, forget, tail, pause, resume} {
		adminFlags(c)
	}
	return []*cobra.Command{key, forget, tail, pause, resume}
}
