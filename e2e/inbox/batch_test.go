package inboxe2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
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

// TestInboxBatchKeepsItsOrder (docs/caddyfile.md: Batches): in inbox mode
// a batch's items are accepted in one store call, in their order, so the
// items of one order_by group are delivered in the order the provider
// listed them, each once, on the file store, on Redis and on Redis
// Cluster. (That the call is one script on standalone Redis is
// internal/inbox's TestAcceptBatch: here the inbox's workers run scripts
// of their own meanwhile.)
func TestInboxBatchKeepsItsOrder(t *testing.T) {
	srv := testkit.StartRedis(t)
	cluster := testkit.StartCluster(t)
	for _, tc := range []struct{ name, store string }{
		{"file", "store file " + filepath.Join(t.TempDir(), "store.db")},
		{"redis", "store redis redis://" + srv.Addr()},
		// the items' keys on three masters: accepted one by one, a
		// group's in order
		{"cluster", cluster.StoreBlock("timeout 5s")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var order []string
			var app *testkit.Upstream
			app = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
				got := app.Requests()[call-1]
				var env struct {
					Items []struct {
						ID string `json:"id"`
					} `json:"items"`
				}
				_ = json.Unmarshal(got.Body, &env)
				mu.Lock()
				for _, it := range env.Items {
					order = append(order, it.ID)
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // long enough for a second worker to overtake, were it allowed
				w.WriteHeader(http.StatusOK)
			})
			port := testkit.FreePort(t)
			source := fmt.Sprintf("batch_order_%s_%d", tc.name, time.Now().UnixNano())
			testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		%s
		batch json:items {
			key json:id
		}
		inbox %s {
			order_by json:items.0.customer
			concurrency 8
			timeout 5s
		}
	}
}`, port, source, handoffStripeSecret, tc.store, app.URL))
			url := testkit.SiteURL(port) + "/stripe"
			var items, want []string
			for i := range 40 {
				id := fmt.Sprintf("evt_%02d", i)
				items = append(items, fmt.Sprintf(`{"id":%q,"customer":"cus_%d"}`, id, i%2))
				want = append(want, id)
			}
			body := []byte(`{"items":[` + strings.Join(items, ",") + `]}`)
			if status := postSignedAt(t, url, "stripe", handoffStripeSecret, body, time.Now()); status != http.StatusAccepted {
				t.Fatalf("batch: %d", status)
			}
			testkit.WaitFor(t, 30*time.Second, "every item delivered", func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				return len(order) >= len(want), fmt.Sprint(len(order), " delivered")
			})
			resp, rb := postSigned(t, url, "stripe", handoffStripeSecret, body, time.Now())
			wantAcceptReplayed(t, resp, rb)
			mu.Lock()
			defer mu.Unlock()
			for _, customer := range []int{0, 1} {
				var got, wantOf []string
				for _, id := range order {
					var n int
					if _, err := fmt.Sscanf(id, "evt_%d", &n); err == nil && n%2 == customer {
						got = append(got, id)
					}
				}
				for _, id := range want {
					var n int
					_, _ = fmt.Sscanf(id, "evt_%d", &n)
					if n%2 == customer {
						wantOf = append(wantOf, id)
					}
				}
				if !slices.Equal(got, wantOf) {
					t.Fatalf("cus_%d's items delivered as %v, want %v, each once", customer, got, wantOf)
				}
			}
		})
	}
}
