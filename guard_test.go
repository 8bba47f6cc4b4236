package webhookidempotency

import (
	"net/http"
	"testing"
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
		{"github", providers["github"].defaultKey, []bool{true, false}},
		{"shopify", providers["shopify"].defaultKey, []bool{true, true, true, false}},
		{"twilio", providers["twilio"].defaultKey, []bool{true, false}},
		{"twilio", []string{"query:CallSid", "body"}, []bool{false, false}},
		{"square", []string{"query:id", "header:X-Id"}, []bool{false, true}},
		{"standard", providers["standard"].defaultKey, []bool{false, false}},
		{"svix", providers["svix"].defaultKey, []bool{false, false}},
		{"stripe", providers["stripe"].defaultKey, []bool{false, false}},
		{"stripe", []string{"header:Idempotency-Key", "json:id"}, []bool{true, false}},
		{"whatsapp", providers["whatsapp"].defaultKey, []bool{false}},
		{"mercadopago", providers["mercadopago"].defaultKey, []bool{false, false}},
		{"gitlab", providers["gitlab"].defaultKey, []bool{false, false}},
		{"stone", providers["stone"].defaultKey, []bool{true, false}},
		{"evolution", []string{"header:X-Id", "body"}, []bool{false, false}},
		{"asaas", []string{"header:X-Id", "json:id", "body"}, []bool{false, false, false}},
		{"twitch", providers["twitch"].defaultKey, []bool{false, false}},
		{"twitch", []string{"header:X-Id", "body"}, []bool{true, false}},
		{"hubspot", []string{"query:objectId", "header:X-Id", "body"}, []bool{false, true, false}},
		{"linear", providers["linear"].defaultKey, []bool{true, false}},
		{"razorpay", providers["razorpay"].defaultKey, []bool{true, false}},
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
		h := &Handler{Verify: &VerifyConfig{Scheme: tc.scheme}, keys: keys, verifier: acceptAll{}}
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
