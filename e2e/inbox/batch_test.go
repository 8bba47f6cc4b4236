package inboxe2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestInboxBatchItemsAreEventsOfTheirOwn (docs/caddyfile.md: Batches): in
// inbox mode each new item of a batch is an event of its own, delivered
// in the envelope holding that one item with a signature the provider's
// library accepts, and retried alone; a batch retried with another
// composition adds only its new items, and one with none is answered as
// a duplicate.
func TestInboxBatchItemsAreEventsOfTheirOwn(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	source := fmt.Sprintf("batch_inbox_%d", time.Now().UnixNano())
	var mu sync.Mutex
	attempts := map[string]int{} // per item id
	var bad []string
	var app *testkit.Upstream
	app = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		got := app.Requests()[call-1]
		var env struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
			Envelope string `json:"envelope"`
		}
		_ = json.Unmarshal(got.Body, &env)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.ValidatePayload(got.Body, got.Header.Get("Stripe-Signature"), handoffStripeSecret); err != nil {
			bad = append(bad, "signature: "+err.Error())
		}
		if len(env.Items) != 1 || env.Envelope != "kept" {
			bad = append(bad, "body: "+string(got.Body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id := env.Items[0].ID
		attempts[id]++
		if id == "evt_2" && attempts[id] == 1 {
			// the application is down for this one item once
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		store redis redis://%s
		batch json:items {
			key json:id
		}
		inbox %s {
			retries 100ms
			jitter 0%%
			timeout 5s
		}
	}
}`, port, source, handoffStripeSecret, srv.Addr(), app.URL))
	url := testkit.SiteURL(port) + "/stripe"
	body := func(ids ...string) []byte {
		var items []string
		for _, id := range ids {
			items = append(items, `{"id":"`+id+`","object":"event"}`)
		}
		return []byte(`{"envelope":"kept","items":[` + strings.Join(items, ",") + `]}`)
	}
	if status := postSignedAt(t, url, "stripe", handoffStripeSecret, body("evt_1", "evt_2", "evt_3"), time.Now()); status != http.StatusAccepted {
		t.Fatalf("first batch: %d", status)
	}
	if status := postSignedAt(t, url, "stripe", handoffStripeSecret, body("evt_2", "evt_4", "evt_3", "evt_5"), time.Now()); status != http.StatusAccepted {
		t.Fatalf("recomposed batch: %d", status)
	}
	testkit.WaitFor(t, 30*time.Second, "every item delivered", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for _, id := range []string{"evt_1", "evt_3", "evt_4", "evt_5"} {
			if attempts[id] >= 1 {
				done++
			}
		}
		return done == 4 && attempts["evt_2"] >= 2, fmt.Sprint(attempts)
	})
	k := inboxKeysOf(source)
	testkit.WaitFor(t, 10*time.Second, "the inbox drained", func() (bool, string) {
		s := readInboxState(t, rc, k)
		return s.stream == 0 && s.retry == 0 && s.dead == 0 && s.pending == 0, s.String()
	})
	// nothing new: answered as a duplicate, nothing delivered
	resp, rb := postSigned(t, url, "stripe", handoffStripeSecret, body("evt_5", "evt_1"), time.Now())
	wantAcceptReplayed(t, resp, rb)

	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"evt_1": 1, "evt_2": 2, "evt_3": 1, "evt_4": 1, "evt_5": 1}
	for id, n := range want {
		if attempts[id] != n {
			t.Errorf("%s: %d attempts, want %d (%v)", id, attempts[id], n, attempts)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("the application got: %s", strings.Join(slices.Compact(bad), "; "))
	}
}
