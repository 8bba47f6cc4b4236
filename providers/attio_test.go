package providers

import (
	"slices"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Attio's "Webhooks" guide: `Attio-Signature` (and the same value in
// `X-Attio-Signature`) is the HMAC-SHA256 hex of the body with the
// webhook's secret; `Idempotency-Key` is "the same between retries and
// redeliveries".
func TestAttio(t *testing.T) {
	const secret = "attio-webhook-secret"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"webhook_id":"9a8b6c2e-0c6b-4a53-8f65-3b1d2a9c4e11","events":[{"event_type":"record.created","id":{"workspace_id":"w1","object_id":"o1","record_id":"r1"},"actor":{"type":"workspace-member","id":"m1"}}]}`)
	sig := sigtest.HMACHex(secret, string(body))
	rt.check(t, "attio", post("Attio-Signature", sig, "X-Attio-Signature", sig), body, nil)
	rt.check(t, "attio", post("Attio-Signature", sigtest.HMACHex("x", string(body))), body, signature.ErrInvalid)
	rt.check(t, "attio", post("Attio-Signature", sig), changeByte(body), signature.ErrInvalid)
	// the legacy header alone is not read: Attio always sends both
	rt.check(t, "attio", post("X-Attio-Signature", sig), body, signature.ErrMissing)
	if k := keyOf(t, "attio", post("Idempotency-Key", "a1b2"), body); k != "header:Idempotency-Key=a1b2" {
		t.Fatalf("key %q", k)
	}
	// forward strips or replaces both copies of the signature
	headers, _ := Credentials(VerifyConfig{Scheme: "attio"})
	if !slices.Contains(headers, "Attio-Signature") || !slices.Contains(headers, "X-Attio-Signature") {
		t.Fatalf("credentials %q", headers)
	}
}
