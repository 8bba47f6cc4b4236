package providers

// Notion: `X-Notion-Signature: sha256=<hex>`, the HMAC-SHA256 of the body
// with the subscription's verification token. A retry carries a new
// `attempt_number`, so the event's id is the key. The verification request
// that brings the token is not answered here (docs/providers.md: More
// presets).
func init() {
	register(&Preset{
		Name: "notion",
		Docs: []string{
			"https://developers.notion.com/reference/webhooks",
			"https://github.com/makenotion/notion-sdk-js/blob/9060802d386afbb82fa7b52ba4298cce0b1e0429/src/webhooks.ts",
			"https://github.com/makenotion/notion-sdk-js/blob/9060802d386afbb82fa7b52ba4298cce0b1e0429/src/api-endpoints/webhooks.ts",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Notion-Signature prefix sha256=
		}`,
		DefaultKey: []string{"json:id", "body"},
		// the verification request's body is the signing secret itself
		Redact: []string{"json:verification_token"},
	})
}
