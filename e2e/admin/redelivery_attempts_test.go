package admin

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestRedeliveryToRedeliverToIsAnAttempt: on a route without an inbox, a
// redelivery to redeliver_to is kept as an attempt of its event, after
// the application's answer to the request, on each store: the event, and
// the list, show both, the redelivery with its destination, status,
// latency and what keep_response keeps of the answer, redacted as the
// request's answer is (docs/archive.md#attempts).
func TestRedeliveryToRedeliverToIsAnAttempt(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	})
	redo := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Api-Key", "answer-secret")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "busy %d", call)
	})
	storeFile := filepath.Join(t.TempDir(), "store.db")
	stores := []struct{ name, directive string }{
		{"file", "store file " + storeFile},
		{"memory", "store memory"},
		{"redis", "store redis redis://" + srv.Addr()},
	}
	port := testkit.FreePort(t)
	var routes strings.Builder
	for _, s := range stores {
		fmt.Fprintf(&routes, `
	handle /%[1]s* {
		webhook_idempotency {
			source redo_%[1]s
			%[2]s
			archive {
				redeliver_to %[3]s/redo
				redact header:X-Api-Key
			}
		}
		reverse_proxy %[4]s
	}`, s.name, s.directive, redo.URL, app.Addr())
	}
	c := testkit.StartCaddy(t, "", fmt.Sprintf("http://127.0.0.1:%d {%s\n}", port, routes.String()))
	site := testkit.SiteURL(port)

	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			source := "redo_" + s.name
			resp, body := testkit.Post(t, site+"/"+s.name+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "k-"+s.name, "Content-Type", "application/json")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("delivery: %s %s", resp.Status, body)
			}
			var list adminEventsJSON
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/events", &list)
			if len(list.Events) != 1 || list.Events[0].History == nil || list.Events[0].History.Total != 1 {
				t.Fatalf("before the redelivery: %+v", list.Events)
			}
			id := list.Events[0].ID

			var out redeliveryOutcome
			c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/"+source+"/events/"+id+"/redeliver", &out)
			if out.Delivered || out.Status != http.StatusServiceUnavailable || out.ID != id {
				t.Fatalf("redeliver: %+v", out)
			}

			var ev archive.Event
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/events/"+id, &ev)
			h := ev.History
			if h == nil || h.Total != 2 || len(h.Attempts) != 2 {
				t.Fatalf("history after one redelivery: %+v", h)
			}
			if first := h.Attempts[0]; first.Destination != "next" || first.Status != http.StatusOK {
				t.Fatalf("the request's attempt: %+v", first)
			}
			re := h.Attempts[1]
			wantDest := redo.URL + "/redo"
			if re.Destination != wantDest || re.Status != http.StatusServiceUnavailable || re.Attempt != 1 || re.Error != "" ||
				re.At.Before(h.Attempts[0].At) || re.LatencyMs <= 0 {
				t.Fatalf("the redelivery's attempt: %+v, want destination %s, status 503", re, wantDest)
			}
			if re.Body == nil || !strings.HasPrefix(*re.Body, "busy ") {
				t.Fatalf("the redelivery's answer body: %v", re.Body)
			}
			if got := re.Headers["X-Api-Key"]; len(got) != 1 || got[0] != "[redacted]" {
				t.Fatalf("the redelivery's answer headers, X-Api-Key not redacted: %v", re.Headers)
			}

			// the list shows it too, without the answer
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/events", &list)
			if len(list.Events) != 1 || list.Events[0].History == nil || list.Events[0].History.Total != 2 ||
				list.Events[0].History.Attempts[1].Status != http.StatusServiceUnavailable || list.Events[0].History.Attempts[1].Body != nil {
				t.Fatalf("the list after the redelivery: %+v", list.Events[0].History)
			}
		})
	}
}

// TestRedeliveryOutcomeStandsWhenNotKept: a redelivery whose attempt
// cannot be kept (its event left the archive while redeliver_to answered)
// answers its outcome all the same, and says at WARN that the event's
// history misses it.
func TestRedeliveryOutcomeStandsWhenNotKept(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	var deleted atomic.Int64
	redo := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		// the event leaves the archive before the answer
		n, err := rc.Del(r.Context(), "{idem:redo_gone}:archive").Result()
		if err == nil {
			deleted.Add(n)
		}
		w.WriteHeader(http.StatusAccepted)
	})
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {})
	logPath := filepath.Join(t.TempDir(), "caddy.log")
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, fmt.Sprintf(`log everything {
		output file %s
		format json
		level INFO
	}`, logPath), fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source redo_gone
		store redis redis://%s
		archive {
			redeliver_to %s/redo
		}
	}
	reverse_proxy %s
}`, port, srv.Addr(), redo.URL, app.Addr()))
	if resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "k1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery: %s %s", resp.Status, body)
	}
	var list adminEventsJSON
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/redo_gone/events", &list)
	if len(list.Events) != 1 {
		t.Fatalf("archived: %+v", list.Events)
	}
	var out redeliveryOutcome
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/redo_gone/events/"+list.Events[0].ID+"/redeliver", &out)
	if !out.Delivered || out.Status != http.StatusAccepted || out.Error != "" || deleted.Load() != 1 {
		t.Fatalf("redeliver: %+v (archive deleted: %d)", out, deleted.Load())
	}
	testkit.WaitFor(t, 10*time.Second, "a WARN that the redelivery was not kept", func() (bool, string) {
		for _, l := range testkit.ReadLogLines(t, logPath) {
			if l["level"] == "warn" && strings.HasPrefix(fmt.Sprint(l["msg"]), "recording a redelivery in the archive failed") &&
				l["source"] == "redo_gone" && l["status"] == float64(http.StatusAccepted) {
				return true, ""
			}
		}
		return false, "no such line in " + logPath
	})
}

// TestRedeliveryErrorRedacted: a redelivery that got no answer says why in
// its outcome as its kept attempt does: redacted (redeliver_to's query
// may hold a token) and on one line (docs/archive.md#attempts).
func TestRedeliveryErrorRedacted(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	gone := testkit.FreePort(t) // nothing listens
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source redo_unreachable
		store memory
		archive {
			redeliver_to http://127.0.0.1:%d/redo?token=s3cr3t-token
		}
	}
	reverse_proxy %s
}`, port, gone, app.Addr()))
	if resp, body := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "k1"); resp.StatusCode != http.StatusOK {
		t.Fatalf("delivery: %s %s", resp.Status, body)
	}
	var list adminEventsJSON
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/redo_unreachable/events", &list)
	if len(list.Events) != 1 {
		t.Fatalf("archived: %+v", list.Events)
	}
	id := list.Events[0].ID
	var out redeliveryOutcome
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/redo_unreachable/events/"+id+"/redeliver", &out)
	if out.Delivered || out.Status != 0 || out.Error == "" || strings.Contains(out.Error, "s3cr3t") ||
		!strings.Contains(out.Error, "token=[redacted]") || strings.Contains(out.Error, "\n") {
		t.Fatalf("redeliver to an address nothing listens on: %+v, want no answer and a redacted error", out)
	}
	var ev archive.Event
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/redo_unreachable/events/"+id, &ev)
	if h := ev.History; h == nil || len(h.Attempts) != 2 || h.Attempts[1].Error != out.Error {
		t.Fatalf("the kept attempt: %+v, want the outcome's error %q", ev.History, out.Error)
	}
}
