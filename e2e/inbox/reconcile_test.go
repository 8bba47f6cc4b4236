package inboxe2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// stripeEvents is a stand-in for Stripe's `GET /v1/events`: the events
// whose delivery failed (here, all of them: Caddy was down when Stripe
// sent them), in pages of two, newest first, as Stripe lists them.
type stripeEvents struct {
	*httptest.Server
	mu     sync.Mutex
	events []string // ids, newest first
	lists  int
}

func newStripeEvents(t *testing.T, ids ...string) *stripeEvents {
	s := &stripeEvents{events: ids}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/events" || r.Header.Get("Authorization") != "Bearer rk_test_reconcile" ||
			r.URL.Query().Get("delivery_success") != "false" {
			http.Error(w, `{"error":{"type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lists++
		start := 0
		if after := r.URL.Query().Get("starting_after"); after != "" {
			for i, id := range s.events {
				if id == after {
					start = i + 1
				}
			}
		}
		end := min(start+2, len(s.events))
		data := make([]json.RawMessage, 0, end-start)
		for _, id := range s.events[start:end] {
			data = append(data, json.RawMessage(`{"id":"`+id+`","object":"event","api_version":"2019-01-01","created":`+fmt.Sprint(time.Now().Unix())+`,"type":"invoice.paid","data":{"object":{"id":"in_`+id+`","object":"invoice"}}}`))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": end < len(s.events), "url": "/v1/events"})
	}))
	t.Cleanup(s.Close)
	return s
}

// TestReconcileRecoversWhatStripeFailedToDeliver: Caddy was down while
// Stripe sent five events; once it is up, one pass enters each into the
// inbox, which delivers it once, signed so that stripe-go's ConstructEvent
// accepts it; Stripe's own late retry of one of them is a duplicate; a
// second pass recovers nothing.
func TestReconcileRecoversWhatStripeFailedToDeliver(t *testing.T) {
	srv := testkit.StartRedis(t)
	ids := []string{"evt_r5", "evt_r4", "evt_r3", "evt_r2", "evt_r1"}
	stripe := newStripeEvents(t, ids...)
	var mu sync.Mutex
	got := map[string]int{}
	var bad []string
	var app *testkit.Upstream
	app = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		req := app.Requests()[call-1]
		ev, err := webhook.ConstructEventWithOptions(req.Body, req.Header.Get("Stripe-Signature"), handoffStripeSecret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad = append(bad, err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got[ev.ID]++
		w.WriteHeader(http.StatusOK)
	})
	source := fmt.Sprintf("reconcile_%d", time.Now().UnixNano())
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		store redis redis://%s
		inbox %s {
			retries 100ms
		}
		reconcile {
			api_key rk_test_reconcile
			api_url %s
			every   1h
		}
	}
}`, port, source, handoffStripeSecret, srv.Addr(), app.URL, stripe.URL))
	var sum struct {
		Recovered int `json:"recovered"`
		Known     int `json:"known"`
	}
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/"+source+"/reconcile?wait=true", &sum)
	if sum.Recovered != len(ids) {
		t.Fatalf("the first pass recovered %d events, want %d", sum.Recovered, len(ids))
	}
	testkit.WaitFor(t, 20*time.Second, "every event delivered", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids), fmt.Sprint(got, bad)
	})
	// Stripe's own retry of one of them comes late: a duplicate
	if status := postSignedAt(t, testkit.SiteURL(port)+"/stripe", "stripe", handoffStripeSecret, []byte(`{"id":"evt_r3","object":"event"}`), time.Now()); status != http.StatusAccepted {
		t.Fatalf("Stripe's retry answered %d", status)
	}
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/"+source+"/reconcile?wait=true", &sum)
	if sum.Recovered != 0 || sum.Known != len(ids) {
		t.Fatalf("the second pass: recovered %d, known %d; want 0 and %d", sum.Recovered, sum.Known, len(ids))
	}
	waitInboxDrained(t, srv.Client(t), inboxKeysOf(source), 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s reached the application %d times, want once (%v)", id, got[id], got)
		}
	}
	if len(bad) > 0 {
		t.Errorf("the application refused: %s", strings.Join(bad, "; "))
	}
}

// TestReconcileFailedPassIs503: a pass asked for with ?wait=true that the
// provider's API refuses (a wrong key here) answers 503 with a JSON error,
// one of the statuses the admin API answers errors with, so that an
// operator's script retries it.
func TestReconcileFailedPassIs503(t *testing.T) {
	srv := testkit.StartRedis(t)
	stripe := newStripeEvents(t, "evt_f1")
	app := testkit.NewUpstream(t, nil)
	source := fmt.Sprintf("reconcile_fail_%d", time.Now().UnixNano())
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		store redis redis://%s
		inbox %s
		reconcile {
			api_key rk_test_wrong
			api_url %s
			every   1h
		}
	}
}`, port, source, handoffStripeSecret, srv.Addr(), app.URL, stripe.URL))
	resp, body := testkit.Do(t, http.MethodPost, c.AdminURL("/webhook_idempotency/"+source+"/reconcile?wait=true"), nil)
	var e struct {
		Error string `json:"error"`
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/json" ||
		json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "reconciliation pass") {
		t.Fatalf("a failed pass answered %s %q: %s; want 503 with a JSON error", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	if n := app.Calls.Load(); n != 0 {
		t.Fatalf("the application got %d requests", n)
	}
}
