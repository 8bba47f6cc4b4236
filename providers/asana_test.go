package providers

import (
	"slices"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Asana's samples (Asana/devrel-examples, webhooks-nodejs/index.js)
// compute `createHmac("SHA256", secret).update(body).digest("hex")`;
// sigtest.HMACHex computes the same. Asana's handshake (`X-Hook-Secret`,
// no signature) carries the secret itself: the preset does not answer it
// and refuses it, so it never reaches the application through the edge
// (docs/providers.md: More presets).
func TestAsana(t *testing.T) {
	const secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"events":[{"user":{"gid":"1516","resource_type":"user"},"created_at":"2026-01-01T00:00:00.000Z","action":"changed","resource":{"gid":"1337","resource_type":"task","resource_subtype":"default_task"},"parent":null,"change":{"field":"due_on","action":"changed"}}]}`)
	rt.check(t, "asana", post("X-Hook-Signature", sigtest.HMACHex(secret, string(body))), body, nil)
	rt.check(t, "asana", post("X-Hook-Signature", sigtest.HMACHex("other", string(body))), body, signature.ErrInvalid)
	rt.check(t, "asana", post("X-Hook-Signature", sigtest.HMACHex(secret, string(body))), changeByte(body), signature.ErrInvalid)
	rt.check(t, "asana", post("X-Hook-Secret", secret), nil, signature.ErrMissing)
	if slices.Contains(HandshakeProviders(), "asana") {
		t.Fatal("the handshake that carries the secret is answered at the edge")
	}
}
