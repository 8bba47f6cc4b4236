package providers

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Polar signs with the Standard Webhooks library (server/polar/webhook/
// tasks.py), handing it `base64(secret)` for an endpoint whose secret was
// made before 2026-09-08, so the key is the secret's own bytes, `whsec_`
// and all (Polar's Python SDK: `hmac.new(secret.encode(), …)`), and the
// secret as it is for a newer one, which the library decodes. The
// reference library signs both here, as Polar's server does.
func TestPolar(t *testing.T) {
	body := []byte(`{"type":"order.paid","timestamp":"2026-01-01T00:00:00Z","data":{"id":"b3a1e0b2-8a0f-4f4e-9b65-0c6a3d6c1f9e","status":"paid"}}`)
	legacy := "whsec_pK3-9xQ_vR2mLz8Yt7bNwE4uHc1dAs6F" // not base64: Polar's older secrets
	current := "whsec_" + base64.StdEncoding.EncodeToString([]byte("polar-standard-secret-32-bytes!!"))
	sign := func(libSecret, id string, at time.Time, b []byte) []string {
		return standardDelivery(t, libSecret, "webhook-", id, at, b)
	}
	now := time.Now()
	for _, c := range []struct {
		name, secret, libSecret string
	}{
		{"older secret", legacy, base64.StdEncoding.EncodeToString([]byte(legacy))},
		{"newer secret", current, current},
		// an older secret whose tail happens to be base64 is still its bytes
		{"older secret that decodes", current, base64.StdEncoding.EncodeToString([]byte(current))},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := route{secrets: []string{c.secret}}
			rt.check(t, "polar", post(sign(c.libSecret, "evt_1", now, body)...), body, nil)
			rt.check(t, "polar", post(sign(c.libSecret, "evt_1", now, body)...), changeByte(body), signature.ErrInvalid)
			rt.check(t, "polar", post(sign(c.libSecret, "evt_1", now.Add(-6*time.Minute), body)...), body, signature.ErrTimestamp)
			forged := post(sign(c.libSecret, "evt_1", now, body)...)
			forged.Header.Set("webhook-id", "evt_2")
			rt.check(t, "polar", forged, body, signature.ErrInvalid)
		})
	}
	route{secrets: []string{current}}.check(t, "polar", post(sign(base64.StdEncoding.EncodeToString([]byte(legacy)), "evt_1", now, body)...), body, signature.ErrInvalid)
	// the plain Standard Webhooks preset refuses the older secrets' deliveries
	if _, err := buildVerifier(VerifyConfig{Scheme: "standard", Secrets: []string{legacy}}); err == nil {
		t.Fatal("standard takes a secret that is no base64")
	}
	// with two keys per secret, which one the application holds is unknown:
	// polar is re-signed under both, listed in webhook-signature (the
	// application's library with either key: TestForwardResignPolar)
	if !Resigns(VerifyConfig{Scheme: "polar", Secrets: []string{current}}) {
		t.Fatal("polar is not re-signed")
	}
}
