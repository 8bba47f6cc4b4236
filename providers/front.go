package providers

// Front application webhooks: `x-front-signature`, the HMAC-SHA256 base64
// of `{x-front-request-timestamp}:{body}` (milliseconds) with the app's
// secret. The validation Front sends when a webhook is saved is a signed
// delivery with a new `x-front-challenge` each time; it is passed on, keyed
// on the challenge (docs/providers.md: More presets).
func init() {
	register(&Preset{
		Name: "front",
		Docs: []string{
			"https://dev.frontapp.com/docs/application-webhooks",
			"https://dev.frontapp.com/docs/security-1",
			"https://community.front.com/developer-q-a-37/webhook-authorization-token-raw-request-body-873",
		},
		Block: `template {
			string    "{header.X-Front-Request-Timestamp}:{body}"
			algorithm hmac-sha256
			signature header:X-Front-Signature encoding base64
			timestamp header:X-Front-Request-Timestamp unit ms
		}`,
		DefaultKey: []string{"header:X-Front-Challenge", "body"},
		Volatile:   []string{"X-Front-Signature", "X-Front-Request-Timestamp"},
	})
}
