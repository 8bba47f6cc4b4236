package inboxe2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The attempts of inbox events through a real Caddy on the file store, as
// the admin API shows them (docs/inbox.md#attempts): an event that fails
// twice (a 503 with a long body, then no answer within the timeout) and
// then succeeds has three attempts, each with its status, latency and
// destination, the failing answer's body cut to keep_response, and the
// transport error; a dead letter shows its body and its attempts; with
// keep_response 0 the attempts keep no answer's headers and body.
func TestInboxAttemptsShownByTheAdminAPI(t *testing.T) {
	var flaky atomic.Int64
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/flaky":
			switch flaky.Add(1) {
			case 1:
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "maintenance window: "+strings.Repeat("m", 5000))
			case 2:
				<-r.Context().Done() // no answer
			default:
				_, _ = io.WriteString(w, `{"ok":true}`)
			}
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"unknown customer"}`)
		}
	})
	port := testkit.FreePort(t)
	route := func(path, keep string) string {
		return fmt.Sprintf(`	handle /%[1]s {
		webhook_idempotency {
			source %[1]s
			archive
			%[2]s
			inbox {
				deliver_to %[3]s/%[1]s
				retries 100ms 100ms
				jitter 0%%
				timeout 3s
			}
		}
	}
`, path, keep, app.URL)
	}
	c := testkit.StartCaddy(t, "", fmt.Sprintf("http://127.0.0.1:%d {\n%s%s%s}", port,
		route("flaky", "keep_response 300"), route("refuse", ""), route("quiet", "keep_response 0")))
	for _, path := range []string{"flaky", "refuse", "quiet"} {
		resp, body := testkit.Post(t, testkit.SiteURL(port)+"/"+path, []byte(`{"id":"evt_`+path+`","card":"4242"}`), "Idempotency-Key", "evt_"+path)
		wantAccepted(t, resp, body)
	}
	get := func(path string, into any) {
		t.Helper()
		resp, body := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"+path), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}

	// three attempts, listed without the answers
	var list struct {
		Events []struct {
			ID      string  `json:"id"`
			History history `json:"history"`
		} `json:"events"`
	}
	testkit.WaitFor(t, 30*time.Second, "evt_flaky delivered at its third attempt", func() (bool, string) {
		get("flaky/events", &list)
		return len(list.Events) == 1 && list.Events[0].History.Total == 3, fmt.Sprintf("%+v", list.Events)
	})
	for _, a := range list.Events[0].History.Attempts {
		if a.Body != nil || a.Headers != nil {
			t.Fatalf("a list shows no answer: %+v", a)
		}
	}
	// whole: the answers, as kept
	var ev struct {
		History history `json:"history"`
	}
	get("flaky/events/"+list.Events[0].ID, &ev)
	h := ev.History
	if h.Total != 3 || len(h.Attempts) != 3 {
		t.Fatalf("history %+v", h)
	}
	for i, a := range h.Attempts {
		if a.Attempt != i+1 || a.Destination != app.URL+"/flaky" || a.LatencyMs <= 0 || a.At.IsZero() {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
	}
	first, second, third := h.Attempts[0], h.Attempts[1], h.Attempts[2]
	kept := 0
	for name, vs := range first.Headers {
		for _, v := range vs {
			kept += len(name) + len(v) + 4
		}
	}
	if first.Status != 503 || first.Body == nil || !strings.HasPrefix(*first.Body, "maintenance window: mmm") || !first.Truncated ||
		kept+len(*first.Body) > 300 || first.Headers["Retry-After"] == nil || first.Error != "" {
		t.Fatalf("the 503, its answer within keep_response 300: %+v", first)
	}
	if second.Status != 0 || !strings.Contains(second.Error, "timeout after 3s") || second.LatencyMs < 3000 || second.Body != nil {
		t.Fatalf("the attempt without an answer: %+v", second)
	}
	if third.Status != 200 || third.Body == nil || *third.Body != `{"ok":true}` || third.Truncated {
		t.Fatalf("the 200: %+v", third)
	}

	// a dead letter: its body and its attempts, with and without answers
	for _, c2 := range []struct {
		source string
		answer bool
	}{{"refuse", true}, {"quiet", false}} {
		var dead []struct {
			Key     string  `json:"key"`
			Body    *string `json:"body"`
			History history `json:"history"`
		}
		testkit.WaitFor(t, 10*time.Second, "evt_"+c2.source+" dead-lettered", func() (bool, string) {
			get(c2.source+"/dead", &dead)
			return len(dead) == 1, fmt.Sprintf("%+v", dead)
		})
		d := dead[0]
		if d.Key != "evt_"+c2.source || d.Body == nil || *d.Body != `{"id":"evt_`+c2.source+`","card":"4242"}` || d.History.Total != 1 {
			t.Fatalf("%s: the dead letter %+v", c2.source, d)
		}
		a := d.History.Attempts[0]
		if a.Status != 422 || a.LatencyMs <= 0 {
			t.Fatalf("%s: the attempt %+v", c2.source, a)
		}
		if c2.answer && (a.Body == nil || *a.Body != `{"error":"unknown customer"}` || a.Headers["Content-Type"] == nil) {
			t.Fatalf("%s: the answer kept %+v", c2.source, a)
		}
		if !c2.answer && (a.Body != nil || a.Headers != nil) {
			t.Fatalf("%s: keep_response 0 kept %+v", c2.source, a)
		}
	}
}

// history is the history shape of docs/admin.md.
type history struct {
	Total    int `json:"total"`
	Attempts []struct {
		At          time.Time           `json:"at"`
		Destination string              `json:"destination"`
		Attempt     int                 `json:"attempt"`
		Status      int                 `json:"status"`
		LatencyMs   float64             `json:"latency_ms"`
		Error       string              `json:"error"`
		Truncated   bool                `json:"truncated"`
		Headers     map[string][]string `json:"headers"`
		Body        *string             `json:"body"`
	} `json:"attempts"`
}
