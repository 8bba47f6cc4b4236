package providers

import (
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Nylas signs the body with the webhook's secret, HMAC-SHA256 in hex
// (Nylas's CLI, internal/adapters/webhookserver/signature.go, which also
// accepts upper-case hex); its GET challenge is TestChallengeEcho's.
func TestNylas(t *testing.T) {
	const secret = "test-secret"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"specversion":"1.0","type":"message.created","source":"/google/emails/realtime","id":"mock-id","time":1767225600,"webhook_delivery_attempt":1,"data":{"application_id":"NYLAS_APPLICATION_ID","object":{"id":"msg_1","grant_id":"g_1"}}}`)
	sig := sigtest.HMACHex(secret, string(body))
	rt.check(t, "nylas", post("X-Nylas-Signature", sig), body, nil)
	rt.check(t, "nylas", post("x-nylas-signature", strings.ToUpper(sig)), body, nil)
	rt.check(t, "nylas", post("X-Nylas-Signature", sigtest.HMACHex("other", string(body))), body, signature.ErrInvalid)
	rt.check(t, "nylas", post("X-Nylas-Signature", sig), changeByte(body), signature.ErrInvalid)
	if k := keyOf(t, "nylas", post(), body); k != "json:id=mock-id" {
		t.Fatalf("key %q", k)
	}
}
