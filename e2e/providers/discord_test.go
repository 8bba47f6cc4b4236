package providers_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Discord sends its interactions and its webhook events under the same
// signature, and a webhook event has the `"type":1` of an interaction
// PING. The bodies of discord-interactions 4.4.0's vectors
// (internal/sigtest/testdata/discord-interactions-4.4.0.json, which
// records what that library's middleware for each body's API did) are
// signed now with the same key and sent through the discord preset: each
// PING gets the answer its API's middleware gave, nothing else reaches
// the application; every other body reaches it once, and Discord's retry
// of a webhook event (signed anew) is answered from the store.
func TestDiscordInteractionsAndWebhookEvents(t *testing.T) {
	vecs := sigtest.LoadDiscord(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		// Discord wants a webhook event acknowledged with a 204
		w.WriteHeader(http.StatusNoContent)
	})
	c, base := proxy(t, "webhook_idempotency discord public_key "+vecs.PublicKey, up)
	url := base + "/discord"

	var passed [][]byte
	pings := 0
	for _, vec := range vecs.Vectors {
		body := []byte(vec.Body)
		resp, got := signed(t, url, "discord", "discord-app-1", body)
		if !vec.SDK.PassedOn {
			pings++
			if resp.StatusCode != vec.SDK.Status || resp.Header.Get("Content-Type") != vec.SDK.ContentType || string(got) != vec.SDK.Body {
				t.Fatalf("%s: %d %q %q; discord-interactions answers %d %q %q", vec.Name, resp.StatusCode, resp.Header.Get("Content-Type"), got, vec.SDK.Status, vec.SDK.ContentType, vec.SDK.Body)
			}
			continue
		}
		testkit.WantNew(t, resp, got, http.StatusNoContent)
		passed = append(passed, body)
	}
	reqs := up.Requests()
	if len(reqs) != len(passed) {
		t.Fatalf("the application got %d deliveries, want %d", len(reqs), len(passed))
	}
	for i, r := range reqs {
		if !bytes.Equal(r.Body, passed[i]) {
			t.Fatalf("delivery %d: the application got %s, want %s", i+1, r.Body, passed[i])
		}
	}
	wantMetric(t, c, float64(pings), "caddy_webhook_idempotency_requests_total", "source", "discord", "result", "handshake")

	// Discord retries a webhook event that got no 204 in time
	for _, vec := range vecs.Vectors {
		if vec.API != "webhook events" || !vec.SDK.PassedOn {
			continue
		}
		resp, got := signed(t, url, "discord", "discord-app-1", []byte(vec.Body))
		testkit.WantReplay(t, resp, got, http.StatusNoContent, "")
	}
	up.WantCalls(t, int64(len(passed)))

	// a forged webhook PING is refused like any delivery
	resp, got := signed(t, url, "discord", "discord-wrong", []byte(`{"version":1,"application_id":"1234560123453231555","type":0}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged PING: %d %s", resp.StatusCode, got)
	}
}
