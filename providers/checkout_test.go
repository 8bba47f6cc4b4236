package providers

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// Checkout.com: Cko-Signature, the HMAC-SHA256 hex of the body under the
// webhook's signature key ("Receive webhooks": hash the raw body with the
// key, hex-encoded); the key of the Go SDK's workflow test.
func TestCheckout(t *testing.T) {
	c := bodyHMACCase{preset: "checkout", header: "Cko-Signature", sign: hmacOf(sha256.New, "", false)}
	body := []byte(`{"id":"evt_az5sblvku4ge3dwpztvyizgcau","type":"payment_captured","version":"1.0.33","created_on":"2027-01-01T00:00:00.000Z","data":{"id":"pay_mbabizu24mvu3mela5njyhpit4","amount":6540,"currency":"GBP"}}`)
	checkBodyHMAC(t, c, "8V8x0dLK%AyD*DNS8JJr", body)
	// Checkout.com does not say the case of its hex: either is read
	checkVectorBodyHMAC(t, "checkout", "Cko-Signature", "8V8x0dLK%AyD*DNS8JJr", strings.ToUpper(c.sign("8V8x0dLK%AyD*DNS8JJr", body)), body)
	p := wantPreset(t, "checkout", []string{"json:id", "body"}, 2*day, nil)
	if p.Addresses == nil || !strings.HasSuffix(p.Addresses.URL, "/webhooks-live.txt") || p.Addresses.Field != "" {
		t.Errorf("addresses %+v", p.Addresses)
	}
}
