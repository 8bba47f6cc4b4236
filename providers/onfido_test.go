package providers

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Onfido's Node client (onfido-node at 2b9faecc, v6.3.0,
// test/classic-webhook-event-verifier.test.ts): its token, event and the
// X-SHA2-Signature WebhookEventVerifier.readPayload accepts, and the one
// with a changed first digit it refuses.
func TestOnfido(t *testing.T) {
	const token = "_ABC123abc123ABC123abc123ABC123_"
	body := []byte(`{"payload":{"resource_type":"check","action":"check.completed","object":{"id":"check-123","status":"complete","completed_at_iso8601":"2020-01-01T00:00:00Z","href":"https://api.onfido.com/v3/checks/check-123"}}}`)
	rt := route{secrets: []string{token}}
	rt.check(t, "onfido", post("X-SHA2-Signature", "a0082d7481f9f0a2907583dbe1f344d6d4c0d9989df2fd804f98479f60cd760e"), body, nil)
	rt.check(t, "onfido", post("X-SHA2-Signature", "b0082d7481f9f0a2907583dbe1f344d6d4c0d9989df2fd804f98479f60cd760e"), body, signature.ErrInvalid)
	rt.check(t, "onfido", post("X-SHA2-Signature", "a0082d7481f9f0a2907583dbe1f344d6d4c0d9989df2fd804f98479f60cd760e"), changeByte(body), signature.ErrInvalid)
	route{secrets: []string{"_ABC123abc123ABC123abc123ABC124_"}}.check(t, "onfido", post("X-SHA2-Signature", "a0082d7481f9f0a2907583dbe1f344d6d4c0d9989df2fd804f98479f60cd760e"), body, signature.ErrInvalid)
}
