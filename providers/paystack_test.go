package providers

import (
	"crypto/sha512"
	"net/http"
	"testing"
)

// Paystack: x-paystack-signature, the HMAC-SHA512 hex of the body under the
// account's secret key, as Paystack's webhook page computes it
// (crypto.createHmac('sha512', secret).update(body).digest('hex')).
func TestPaystack(t *testing.T) {
	c := bodyHMACCase{preset: "paystack", header: "X-Paystack-Signature", sign: hmacOf(sha512.New, "", false)}
	body := []byte(`{"event":"charge.success","data":{"id":302961,"domain":"live","status":"success","reference":"qTPrJoy9Bx","amount":10000,"authorization":{"authorization_code":"AUTH_8dfhjjdt","bin":"539999","last4":"8877"},"customer":{"email":"ü@example.com"}}}`)
	checkBodyHMAC(t, c, "sk_test_b748a89ad84f35c2f1a8b81681f956274de048bb", body)
	p := wantPreset(t, "paystack", []string{"body"}, 4*day, nil)
	if p.Success == nil || p.Success.Status != http.StatusOK || p.Success.Body != "" {
		t.Errorf("paystack takes only a 200: %+v", p.Success)
	}
}
