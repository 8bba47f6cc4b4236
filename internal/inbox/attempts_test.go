package inbox

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Every attempt is kept in its event's history (docs/inbox.md#attempts),
// on the redis store and on the file store: a failing answer's status,
// headers (redacted) and body within keep_response, a transport failure's
// error, and the 2xx that delivered it, each with its destination, number
// and latency; the history is kept once the event is delivered.
func TestInboxAttemptHistory(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				_, _ = io.Copy(io.Discard, r.Body)
				switch calls.Add(1) {
				case 1:
					w.Header().Set("Set-Cookie", "session=s3cr3t")
					w.Header().Set("X-Trace", "t-1")
					w.WriteHeader(http.StatusInternalServerError)
					_, _ = io.WriteString(w, "database unavailable: "+strings.Repeat("x", 500))
				case 2:
					<-r.Context().Done() // no answer: the attempt times out
				default:
					_, _ = io.WriteString(w, `{"ok":true}`)
				}
			})
			ib := newOrderedInbox(t, open(t), "history", app.URL, func(c *Config) {
				c.Retries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
				c.Jitter = 0
				// what the answered attempts take on a loaded machine; the
				// unanswered one waits it out
				c.Timeout = 2 * time.Second
				c.KeepResponse = 200
			})
			ib.Start()
			acceptIn(t, ib, "k1", "")
			testkit.WaitFor(t, 30*time.Second, "k1 delivered at its third attempt", func() (bool, string) {
				c, err := ib.Counts(t.Context())
				return err == nil && c.Pending == 0 && c.Scheduled == 0 && calls.Load() == 3, fmt.Sprintf("%+v %v, %d calls", c, err, calls.Load())
			})
			hs, err := ib.Attempts(t.Context(), "k1", "unknown")
			if err != nil || len(hs) != 2 {
				t.Fatalf("histories: %v %v", hs, err)
			}
			if hs[1].Total != 0 {
				t.Fatalf("a key never attempted has a history: %+v", hs[1])
			}
			h := hs[0]
			if h.Total != 3 || len(h.Attempts) != 3 {
				t.Fatalf("%d of %d attempts kept, want 3 of 3", len(h.Attempts), h.Total)
			}
			for i, a := range h.Attempts {
				if a.Number != i+1 || a.Destination != app.URL || a.At.IsZero() || a.Latency <= 0 {
					t.Fatalf("attempt %d: %+v", i+1, a)
				}
			}
			first, second, third := h.Attempts[0], h.Attempts[1], h.Attempts[2]
			if first.Status != 500 || !strings.Contains(first.Headers, "Set-Cookie: [redacted]\r\n") || !strings.Contains(first.Headers, "X-Trace: t-1\r\n") ||
				!strings.HasPrefix(string(first.Body), "database unavailable: xxx") || !first.Truncated ||
				len(first.Headers)+len(first.Body) > 200 || first.Error != "" {
				t.Fatalf("the 500, within keep_response 200: %+v (%q)", first, first.Body)
			}
			if second.Status != 0 || !strings.Contains(second.Error, "timeout after 2s") || second.Headers != "" || second.Body != nil {
				t.Fatalf("the attempt without an answer: %+v", second)
			}
			if second.Latency < 2*time.Second {
				t.Fatalf("the timed-out attempt took %s", second.Latency)
			}
			if third.Status != 200 || string(third.Body) != `{"ok":true}` || third.Truncated {
				t.Fatalf("the 200: %+v (%q)", third, third.Body)
			}
		})
	}
}

// A dead letter shows its body (redacted by the archive's rules) and its
// history; keep_response 0 keeps each attempt without its answer's headers
// and body.
func TestInboxDeadLetterBodyAndHistory(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = io.WriteString(w, `{"error":"unknown customer"}`)
			})
			for _, keep := range []int{event.DefaultKeepResponse, 0} {
				ib := newOrderedInbox(t, open(t), fmt.Sprint("dead-body-", keep), app.URL, func(c *Config) { c.KeepResponse = keep })
				ib.Start()
				acceptIn(t, ib, "d1", "")
				testkit.WaitFor(t, 10*time.Second, "d1 dead-lettered", func() (bool, string) {
					c, err := ib.Counts(t.Context())
					return err == nil && c.Dead == 1, fmt.Sprintf("%+v %v", c, err)
				})
				dead, err := ib.DeadLetters(t.Context(), "", "-", 10)
				if err != nil || len(dead) != 1 {
					t.Fatalf("dead letters %+v, %v", dead, err)
				}
				dl := dead[0]
				if dl.Body == nil || *dl.Body != `{"id":"d1"}` || dl.History == nil || dl.History.Total != 1 || len(dl.History.Attempts) != 1 {
					t.Fatalf("keep_response %d: the dead letter's body and history: %+v", keep, dl)
				}
				a := dl.History.Attempts[0]
				body := ""
				if a.Body != nil {
					body = *a.Body
				}
				wantBody := `{"error":"unknown customer"}`
				if keep == 0 {
					wantBody = ""
				}
				if a.Status != 422 || a.Attempt != 1 || body != wantBody || (keep == 0) != (a.Headers == nil) {
					t.Fatalf("keep_response %d: the attempt %+v (%q)", keep, a, body)
				}
			}
		})
	}
}

// An event delivered to several destinations (routes) has one history:
// each attempt names its destination.
func TestInboxAttemptHistoryFanOut(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			appA := newRecorder(t, func(string, int) int { return http.StatusOK })
			appB := newRecorder(t, func(_ string, n int) int {
				if n == 1 {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			appD := newRecorder(t, func(string, int) int { return http.StatusOK })
			ib := newOrderedInbox(t, open(t), "fan-history", appD.URL, func(c *Config) {
				c.Retries = []time.Duration{50 * time.Millisecond}
				c.Routes = []Route{
					{URL: appA.URL, Rule: "kind=ab", Match: kindIs(func(k string) bool { return k == "ab" })},
					{URL: appB.URL, Rule: "kind=ab", Match: kindIs(func(k string) bool { return k == "ab" })},
				}
			})
			ib.Start()
			acceptKind(t, ib, "e1", "ab", "", "")
			testkit.WaitFor(t, 10*time.Second, "e1 delivered to A and B", func() (bool, string) {
				return len(appA.delivered()) == 1 && len(appB.delivered()) == 1, fmt.Sprintf("A %v, B %v", appA.delivered(), appB.delivered())
			})
			var h event.History
			testkit.WaitFor(t, 30*time.Second, "three attempts in e1's history", func() (bool, string) {
				hs, err := ib.Attempts(t.Context(), "e1")
				if err != nil {
					return false, err.Error()
				}
				h = hs[0]
				return h.Total == 3, fmt.Sprintf("%+v", h)
			})
			got := map[string][]int{}
			for _, a := range h.Attempts {
				got[a.Destination] = append(got[a.Destination], a.Status)
			}
			if fmt.Sprint(got[appA.URL]) != "[200]" || fmt.Sprint(got[appB.URL]) != "[503 200]" || len(got) != 2 {
				t.Fatalf("attempts by destination: %v", got)
			}
		})
	}
}

// A history keeps the newest event.MaxAttempts attempts and the count of
// all; with a bound on the source's histories (the archive's max_events),
// the longest untouched go first: on the file store, on Redis and on Redis
// Cluster (one script on the source's slot drops them).
func TestInboxHistoryBounds(t *testing.T) {
	t.Parallel()
	stores := maps.Clone(backends)
	stores["cluster"] = func(t *testing.T) store.Store { return openRedisStore(t, testkit.StartCluster(t).Addrs()...) }
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(key string, _ int) int {
				if key == "long" {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			})
			s := open(t)
			long := newOrderedInbox(t, s, "bounds", app.URL, func(c *Config) {
				c.Retries = slices.Repeat([]time.Duration{10 * time.Millisecond}, 24)
				c.Jitter = 0
			})
			long.Start()
			acceptIn(t, long, "long", "")
			testkit.WaitFor(t, 20*time.Second, "25 attempts, then a dead letter", func() (bool, string) {
				c, err := long.Counts(t.Context())
				return err == nil && c.Dead == 1, fmt.Sprintf("%+v %v, %d attempts", c, err, len(app.seen()))
			})
			h := history(t, long, "long")
			if h.Total != 25 || len(h.Attempts) != event.MaxAttempts || h.Attempts[0].Number != 6 || h.Attempts[event.MaxAttempts-1].Number != 25 {
				t.Fatalf("25 attempts: %d kept of %d, from %d", len(h.Attempts), h.Total, h.Attempts[0].Number)
			}

			bound := newOrderedInbox(t, s, "bounded", app.URL, func(c *Config) { c.AttemptsMax = 3 })
			bound.Start()
			for _, k := range []string{"b1", "b2", "b3", "b4"} {
				acceptIn(t, bound, k, "")
				testkit.Eventually(t, 10*time.Second, k+" attempted", func() bool { return history(t, bound, k).Total == 1 })
			}
			var kept []string
			for _, k := range []string{"b1", "b2", "b3", "b4"} {
				if history(t, bound, k).Total > 0 {
					kept = append(kept, k)
				}
			}
			if fmt.Sprint(kept) != "[b2 b3 b4]" {
				t.Fatalf("with at most 3 histories, kept %v", kept)
			}
		})
	}
}

// history reads the history of key's event.
func history(t *testing.T, ib *Inbox, key string) event.History {
	t.Helper()
	hs, err := ib.Attempts(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return hs[0]
}
