package providers

// Vercel: `x-vercel-signature`, the HMAC-SHA1 hex of the body keyed with
// the webhook's secret (account webhooks) or the integration's client
// secret (integration webhooks).
func init() {
	register(&Preset{
		Name: "vercel",
		Docs: []string{
			"https://vercel.com/docs/webhooks",
			"https://vercel.com/docs/webhooks/webhooks-api",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha1
			signature header:X-Vercel-Signature
		}`,
		DefaultKey: []string{"json:id", "body"},
	})
}
