package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// Razorpay: `X-Razorpay-Signature`, HMAC-SHA256 hex of the body with the
// webhook secret; x-razorpay-event-id is outside it: that key is guarded.
func init() {
	register(&Preset{
		Name: "razorpay",
		Docs: []string{
			"https://razorpay.com/docs/webhooks/validate-test/",
			"https://razorpay.com/docs/webhooks/best-practices/",
		},
		DefaultKey:  []string{"header:x-razorpay-event-id", "body"},
		scheme:      bodyHMAC("X-Razorpay-Signature", "", signature.Hex),
		Credentials: []string{"X-Razorpay-Signature"},
		resigns:     always,
		signer:      bodyHMACSigner("X-Razorpay-Signature", ""),
	})
}
