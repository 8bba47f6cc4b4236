package providers

// Webflow: `x-webflow-signature`, the HMAC-SHA256 hex of
// `{x-webflow-timestamp}:{body}` (the timestamp in milliseconds) with the
// OAuth application's client secret, or the secret Webflow returns for a
// webhook created through the API. Webflow retries three times, ten
// minutes apart, and does not say whether a retry is signed anew: the
// tolerance covers the retries (docs/providers.md: Webflow).
func init() {
	register(&Preset{
		Name: "webflow",
		Docs: []string{
			"https://developers.webflow.com/v2.0.0-beta/data/docs/working-with-webhooks",
			"https://developers.webflow.com/data/changelog/webhook-signatures",
			"https://developers.webflow.com/data/v1.0.0/docs/verifying-webhook-signatures",
			"https://developers.webflow.com/data/v1.0.0/docs/limits-and-retries",
			"https://github.com/webflow/js-webflow-api/blob/main/src/wrapper/WebhooksClient.ts",
		},
		Block: `template {
			string    "{header.X-Webflow-Timestamp}:{body}"
			algorithm hmac-sha256
			signature header:X-Webflow-Signature
			timestamp header:X-Webflow-Timestamp unit ms
			tolerance 1h
		}`,
		// no event id: a payload's ids are its resource's
		DefaultKey: []string{"body"},
		Volatile:   []string{"X-Webflow-Signature", "X-Webflow-Timestamp"},
	})
}
