package providers

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Typeform: Typeform-Signature: sha256=<base64 HMAC-SHA256 of the body>,
// as "Secure your webhooks" computes it ('sha256=' +
// Base64.strict_encode64(OpenSSL::HMAC.digest('sha256', secret, payload))).
func TestTypeform(t *testing.T) {
	c := bodyHMACCase{preset: "typeform", header: "Typeform-Signature", sign: hmacOf(sha256.New, "sha256=", true)}
	secret := "5d3c4b2a1f0e9d8c7b6a5f4e3d2c1b0a99887766"
	body := []byte(`{"event_id":"01GZQ8XKJ6M4W1R2CC5Y3K7A9B","event_type":"form_response","form_response":{"form_id":"lT4Z3j","token":"a3a12ec67a1365927098a606107fac15","submitted_at":"2027-01-01T00:00:00Z","answers":[{"type":"text","text":"Ünïcödé ✓"}]}}`)
	checkBodyHMAC(t, c, secret, body)
	// the bare base64, without sha256=, is not Typeform's header
	v := mustBuild(t, VerifyConfig{Scheme: "typeform", Secrets: []string{secret}})
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Typeform-Signature", strings.TrimPrefix(c.sign(secret, body), "sha256="))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
	wantPreset(t, "typeform", []string{"json:event_id", "body"}, 0, nil)
}
