package providers

import "net/http"

// Lemon Squeezy: `X-Signature`, the HMAC-SHA256 hex of the body keyed with
// the webhook's signing secret. Anything but a 200 is retried.
func init() {
	register(&Preset{
		Name: "lemonsqueezy",
		Docs: []string{
			"https://docs.lemonsqueezy.com/help/webhooks/signing-requests",
			"https://docs.lemonsqueezy.com/help/webhooks/webhook-requests",
			"https://github.com/lmsqueezy/laravel/blob/main/src/Http/Middleware/VerifyWebhookSignature.php",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Signature
		}`,
		// no event id: data.id is the resource's, shared by its events
		DefaultKey: []string{"body"},
		Success:    &Answer{Status: http.StatusOK},
		// a license key, and pre-signed URLs to the customer's portal and
		// payment method, each usable by whoever holds it
		Redact: []string{"json:data.attributes.key", "json:data.attributes.urls"},
	})
}
