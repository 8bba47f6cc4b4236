package providers_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Mailgun signs its timestamp and token, not the event: through a real
// Caddy, a captured signature block sent with another event is answered
// as a duplicate of the delivery it came with (the token is its nonce) and
// never reaches the application; the same event's retry is replayed, and
// another event with a token of its own is delivered.
func TestMailgunTokenIsANonce(t *testing.T) {
	const key = "e2e-signing-key"
	up := testkit.NewUpstream(t, nil)
	_, base := proxy(t, "webhook_idempotency mailgun {\n\t\tsecret "+key+"\n\t}", up)
	url := base + "/mailgun"
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	block := func(token string) string {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(ts + token))
		return `"signature":{"timestamp":"` + ts + `","token":"` + token + `","signature":"` + hex.EncodeToString(m.Sum(nil)) + `"}`
	}
	event := func(id, token string) []byte {
		return []byte(`{` + block(token) + `,"event-data":{"id":"` + id + `","event":"delivered","recipient":"a@example.com"}}`)
	}
	const token = "0f7ab45cd2e14b3fa6c8e9d01b2a3c4d5e6f7a8b9c0d1e2f3a"
	resp, first := testkit.Post(t, url, event("ev-1", token), "Content-Type", "application/json")
	testkit.WantNew(t, resp, first, http.StatusOK)
	resp, got := testkit.Post(t, url, event("ev-1", token), "Content-Type", "application/json")
	testkit.WantReplay(t, resp, got, http.StatusOK, string(first))
	// the same signature block on another event
	resp, got = testkit.Post(t, url, event("ev-2", token), "Content-Type", "application/json")
	testkit.WantReplay(t, resp, got, http.StatusOK, string(first))
	up.WantCalls(t, 1)
	resp, got = testkit.Post(t, url, event("ev-2", "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"), "Content-Type", "application/json")
	testkit.WantNew(t, resp, got, http.StatusOK)
	up.WantCalls(t, 2)
}
