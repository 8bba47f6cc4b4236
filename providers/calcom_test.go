package providers

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Cal.com signs with createWebhookSignature (packages/features/webhooks/
// lib/sendPayload.ts): `createHmac("sha256", secret).update(body)
// .digest("hex")`, or the literal `no-secret-provided` when the webhook has
// no secret, which must never pass.
func TestCalcom(t *testing.T) {
	rt := route{secrets: []string{"calcom-webhook-secret"}}
	body := []byte(`{"triggerEvent":"BOOKING_CREATED","createdAt":"2026-01-01T00:00:00.000Z","payload":{"type":"30min","title":"30min between A and B","uid":"bFJeNb2uX8ANpT3JL5EfXw","startTime":"2026-01-02T10:00:00Z","endTime":"2026-01-02T10:30:00Z"}}`)
	rt.check(t, "calcom", post("X-Cal-Signature-256", sigtest.HMACHex("calcom-webhook-secret", string(body))), body, nil)
	rt.check(t, "calcom", post("X-Cal-Signature-256", "no-secret-provided"), body, signature.ErrInvalid)
	rt.check(t, "calcom", post("X-Cal-Signature-256", sigtest.HMACHex("x", string(body))), body, signature.ErrInvalid)
	rt.check(t, "calcom", post("X-Cal-Signature-256", sigtest.HMACHex("calcom-webhook-secret", string(body))), changeByte(body), signature.ErrInvalid)
	// even a route whose secret is that literal refuses it
	route{secrets: []string{"no-secret-provided"}}.check(t, "calcom", post("X-Cal-Signature-256", "no-secret-provided"), body, signature.ErrInvalid)
}
