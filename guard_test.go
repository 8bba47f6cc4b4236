package webhookidempotency

import (
	"net/http"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// acceptAll is a verifier for tests of what a signature covers.
type acceptAll struct{}

func (acceptAll) Verify(*http.Request, []byte) error { return nil }

// Which key sources are claimed with the body's key: a header or query
// source that the scheme's signature does not cover, under a scheme that
// signs the body.
func TestMarkUnsignedKeys(t *testing.T) {
	for _, tc := range []struct {
		scheme   string
		keys     []string
		unsigned []bool
	}{
		{"github", presetKey("github"), []bool{true, false}},
		{"shopify", presetKey("shopify"), []bool{true, true, true, false}},
		{"twilio", presetKey("twilio"), []bool{true, false}},
		{"twilio", []string{"query:CallSid", "body"}, []bool{false, false}},
		{"square", []string{"query:id", "header:X-Id"}, []bool{false, true}},
		{"standard", presetKey("standard"), []bool{false, false}},
		{"svix", presetKey("svix"), []bool{false, false}},
		{"stripe", presetKey("stripe"), []bool{false, false}},
		{"stripe", []string{"header:Idempotency-Key", "json:id"}, []bool{true, false}},
		{"whatsapp", presetKey("whatsapp"), []bool{false}},
		{"mercadopago", presetKey("mercadopago"), []bool{false, false}},
		{"gitlab", presetKey("gitlab"), []bool{false, false}},
		{"stone", presetKey("stone"), []bool{true, false}},
		{"evolution", []string{"header:X-Id", "body"}, []bool{false, false}},
		{"asaas", []string{"header:X-Id", "json:id", "body"}, []bool{false, false, false}},
		{"twitch", presetKey("twitch"), []bool{false, false}},
		{"twitch", []string{"header:X-Id", "body"}, []bool{true, false}},
		{"hubspot", []string{"query:objectId", "header:X-Id", "body"}, []bool{false, true, false}},
		{"linear", presetKey("linear"), []bool{true, false}},
		{"razorpay", presetKey("razorpay"), []bool{true, false}},
		{"discord", []string{"header:X-Id", "json:id"}, []bool{true, false}},
		{"jwt", []string{"header:X-Id", "body"}, []bool{false, false}},
		{"ed25519", []string{"header:X-Id", "body"}, []bool{true, false}},
		{"rsa", []string{"query:id", "body"}, []bool{true, false}},
		{"hmac", []string{"header:X-Id", "query:id", "json:id", "body"}, []bool{true, true, false, false}},
		{"token", []string{"header:X-Id", "query:id"}, []bool{false, false}},
	} {
		keys, err := parseKeySources(tc.keys)
		if err != nil {
			t.Fatal(err)
		}
		h := &Handler{Verify: &providers.VerifyConfig{Scheme: tc.scheme}, keys: keys, verification: &providers.Verification{Verifier: acceptAll{}}}
		h.markUnsignedKeys()
		if len(tc.unsigned) != len(h.keys) {
			t.Fatalf("%s: %d expectations for %d key sources", tc.scheme, len(tc.unsigned), len(h.keys))
		}
		for i, ks := range h.keys {
			if ks.unsigned != tc.unsigned[i] {
				t.Errorf("%s, key %q: unsigned %v, want %v", tc.scheme, tc.keys[i], ks.unsigned, tc.unsigned[i])
			}
		}
	}
	// without verification nothing is signed, so nothing is guarded
	keys, _ := parseKeySources([]string{"header:Idempotency-Key", "body"})
	h := &Handler{keys: keys}
	h.markUnsignedKeys()
	if h.keys[0].unsigned {
		t.Error("a handler that verifies nothing guards its header key")
	}
}

// presetKey is a preset's default key chain.
func presetKey(name string) []string {
	p, _ := providers.Lookup(name)
	return p.DefaultKey
}
