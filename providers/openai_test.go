package providers

import (
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// OpenAI's Go SDK publishes a vector (openai-go at 4e5a07a6,
// webhooks/webhook_test.go): its secret, webhook-id, webhook-timestamp,
// body and the webhook-signature VerifySignatureWithToleranceAndTime
// accepts at that time, and refuses with a signature without `v1,`, or
// with timestamps 400 s off.
func TestOpenAI(t *testing.T) {
	const (
		secret    = "whsec_RdvaYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="
		id        = "wh_685c059ae39c8190af8c71ed1022a24d"
		timestamp = "1750861210"
		sig       = "v1,gUAg4R2hWouRZqRQG4uJypNS8YK885G838+EHb4nKBY="
		payload   = `{"id": "evt_685c059ae3a481909bdc86819b066fb6", "object": "event", "created_at": 1750861210, "type": "response.completed", "data": {"id": "resp_123"}}`
	)
	rt := route{secrets: []string{secret}}
	body := []byte(payload)
	at(t, time.Unix(1750861210, 0), func(t *testing.T) {
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", timestamp, "webhook-signature", sig), body, nil)
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", timestamp, "webhook-signature", "v1,invalid_signature "+sig), body, nil)
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", timestamp, "webhook-signature", "v1,invalid_signature1 v1,invalid_signature2"), body, signature.ErrInvalid)
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", timestamp, "webhook-signature", sig), changeByte(body), signature.ErrInvalid)
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", "1750860810", "webhook-signature", sig), body, signature.ErrTimestamp)
		rt.check(t, "openai", post("webhook-id", id, "webhook-timestamp", "1750861610", "webhook-signature", sig), body, signature.ErrTimestamp)
		rt.check(t, "openai", post("webhook-id", id+"x", "webhook-timestamp", timestamp, "webhook-signature", sig), body, signature.ErrInvalid)
		route{secrets: []string{"whsec_" + "AAAAYFYUXuIFuEbvZHwMfYFhUf7aMYjYcmM24+Aj40c="}}.check(t, "openai", post("webhook-id", id, "webhook-timestamp", timestamp, "webhook-signature", sig), body, signature.ErrInvalid)
	})
	if k := keyOf(t, "openai", post("webhook-id", id), body); k != "header:webhook-id="+id {
		t.Fatalf("key %q", k)
	}
}
