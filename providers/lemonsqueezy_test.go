package providers

import (
	"crypto/sha256"
	"net/http"
	"testing"
)

// Lemon Squeezy: X-Signature, the HMAC-SHA256 hex of the body under the
// webhook's signing secret, as Lemon Squeezy's Laravel package checks it
// (hash_hmac('sha256', $payload, $secret)).
func TestLemonSqueezy(t *testing.T) {
	c := bodyHMACCase{preset: "lemonsqueezy", header: "X-Signature", sign: hmacOf(sha256.New, "", false)}
	body := []byte(`{"meta":{"event_name":"license_key_created","custom_data":{"user":"ü"}},"data":{"type":"license-keys","id":"1","attributes":{"key":"80e15db5-c796-436b-850c-8f9c98a48abe","urls":{"customer_portal":"https://my-store.lemonsqueezy.com/billing?expires=1666869343&signature=82ae290ceac8edd4190c82825dd73a8743346d894a8ddbc4898b97eb96d105a5"}}}}`)
	checkBodyHMAC(t, c, "a-signing-secret", body)
	p := wantPreset(t, "lemonsqueezy", []string{"body"}, 0, []string{"json:data.attributes.key", "json:data.attributes.urls"})
	if p.Success == nil || p.Success.Status != http.StatusOK {
		t.Errorf("lemonsqueezy takes only a 200: %+v", p.Success)
	}
}
