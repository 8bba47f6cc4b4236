package providers

// GoCardless: `Webhook-Signature`, the HMAC-SHA256 hex of the body with the
// endpoint's secret. A webhook holds several events, each with a stable id
// by which it is deduplicated (docs/providers.md: Batches).
func init() {
	register(&Preset{
		Name: "gocardless",
		Docs: []string{
			"https://developer.gocardless.com/getting-started/staying-up-to-date-with-webhooks/",
			"https://developer.gocardless.com/api-reference/#appendix-webhooks",
			"https://support.gocardless.com/hc/en-nz/articles/360000989989-Webhook-retries-failures",
			"https://github.com/gocardless/gocardless-pro-go/blob/553b873c5d31d0370a188dbcd02adbae1612042f/webhooks.go",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:Webhook-Signature
		}`,
		DefaultKey: []string{"body"},
		Batch:      &Batch{Path: "json:events", Key: []string{"json:id"}},
	})
}
