package providers_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Shopify's Events deliveries carry shopify-hmac-sha256 and
// shopify-webhook-id, without the X- prefix of its webhooks. The
// deliveries of internal/sigtest/testdata/shopify-api-15.0.0.json, signed
// by @shopify/shopify-api 15.0.0 and judged by its webhooks.validate, get
// through the shopify preset exactly when the library accepts them; an
// Events delivery is keyed on its shopify-webhook-id (the id the library
// returns as webhookId), so Shopify's retry is answered from the store,
// and the same bytes under another webhook id reach the application
// marked as a suspected replay.
func TestShopifyEventsDeliveries(t *testing.T) {
	vecs := sigtest.LoadShopifyAPI(t)
	up := testkit.NewUpstream(t, nil)
	c, base := proxy(t, "webhook_idempotency shopify secret "+quote(vecs.Secret), up)
	hook := base + "/shopify"
	var events map[string]string
	for _, vec := range vecs.Vectors {
		resp, body := testkit.Post(t, hook, []byte(vec.Body), headerPairs(vec.Headers)...)
		if !vec.SDK.Valid {
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s: %d %s; @shopify/shopify-api refuses it", vec.Name, resp.StatusCode, body)
			}
			continue
		}
		testkit.WantNew(t, resp, body, http.StatusOK)
		// an Events delivery is keyed on its webhook id; a webhooks
		// delivery on its X-Shopify-Event-Id, as before
		key := vec.SDK.WebhookID
		if vec.SDK.WebhookType == "events" {
			events = vec.Headers
		} else {
			key = vec.Headers["X-Shopify-Event-Id"]
		}
		var state struct {
			State string `json:"state"`
		}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/shopify/keys/"+url.PathEscape(key), &state)
		if state.State != "completed" {
			t.Fatalf("%s: key %s is %q, want completed", vec.Name, key, state.State)
		}
	}
	if events == nil {
		t.Fatal("no Events delivery among the vectors")
	}
	calls := up.Calls.Load()
	first := up.Requests()[0]

	// Shopify's retry of the Events delivery
	resp, body := testkit.Post(t, hook, first.Body, headerPairs(events)...)
	if resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %s, want a replay", resp.StatusCode, body)
	}
	up.WantCalls(t, calls)

	// the same signed bytes under another webhook id
	other := map[string]string{}
	for k, v := range events {
		other[k] = v
	}
	other["shopify-webhook-id"] = "0c1d5d8e-8f0e-4c52-9d36-2f1c0cb5d5a1"
	resp, body = testkit.Post(t, hook, first.Body, headerPairs(other)...)
	testkit.WantNew(t, resp, body, http.StatusOK)
	reqs := up.Requests()
	if got := reqs[len(reqs)-1].Header.Get("Webhook-Replay-Suspected"); got != events["shopify-webhook-id"] {
		t.Fatalf("Webhook-Replay-Suspected %q, want the first webhook id %q", got, events["shopify-webhook-id"])
	}
}
