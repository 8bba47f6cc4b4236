package providers

import (
	"crypto/sha256"
	"testing"
)

// coinbaseCommerceVector is the webhook of coinbase-commerce-node's own test
// (test/testWebhook.spec.js at d46c59684423b07d068e001ae8c5d58abb9cbbc1):
// Webhook.verifyEventBody accepts it under its secret and refuses it under
// the secret with its last character changed.
const coinbaseCommerceVector = `{"id":1,"scheduled_for":"2017-01-31T20:50:02Z","attempt_number":1,"event":{"id":"24934862-d980-46cb-9402-43c81b0cdba6","type":"charge:created","api_version":"2018-03-22","created_at":"2017-01-31T20:49:02Z","data":{"code":"66BEOV2A","name":"The Sovereign Individual","description":"Mastering the Transition to the Information Age","hosted_url":"https://commerce.coinbase.com/charges/66BEOV2A","created_at":"2017-01-31T20:49:02Z","expires_at":"2017-01-31T21:04:02Z","timeline":[{"time":"2017-01-31T20:49:02Z","status":"NEW"}],"metadata":{},"pricing_type":"no_price","payments":[],"addresses":{"bitcoin":"0000000000000000000000000000000000","ethereum":"0x0000000000000000000000000000000000000000","litecoin":"3000000000000000000000000000000000","bitcoincash":"bitcoincash:000000000000000000000000000000000000000000"}}}}`

// TestCoinbaseCommerce: X-CC-Webhook-Signature, the HMAC-SHA256 hex of the
// body under the shared secret (Webhook.computeSignature of
// coinbase-commerce-node); the SDK's published vector verifies, and its
// wrong-secret case does not.
func TestCoinbaseCommerce(t *testing.T) {
	const (
		secret = "30291a20-0bd1-4267-9b0f-e6e7b123c0bf"
		sig    = "8be7742c7d372f08a6a3224edadf18a22b65fa9e28f3f2de97376cdaa092590d"
	)
	checkVectorBodyHMAC(t, "coinbase_commerce", "X-CC-Webhook-Signature", secret, sig, []byte(coinbaseCommerceVector))
	c := bodyHMACCase{preset: "coinbase_commerce", header: "X-CC-Webhook-Signature", sign: hmacOf(sha256.New, "", false)}
	if c.sign(secret, []byte(coinbaseCommerceVector)) != sig {
		t.Fatal("the formula does not give the SDK's vector")
	}
	checkBodyHMAC(t, c, secret, []byte(coinbaseCommerceVector))
	v := mustBuild(t, VerifyConfig{Scheme: "coinbase_commerce", Secrets: []string{"30291a20-0bd1-4267-9b0f-e6e7b123c0bg"}})
	r := mustRequest("X-CC-Webhook-Signature", sig)
	if err := v.Verify(r, []byte(coinbaseCommerceVector)); err == nil {
		t.Error("the SDK's wrong secret accepted")
	}
	wantPreset(t, "coinbase_commerce", []string{"json:event.id", "body"}, 4*day, nil)
}
