package providers

// CircleCI: `circleci-signature: v1=<hex>[,v2=…]`, a comma-separated list of
// versioned signatures of which `v1` is the HMAC-SHA256 of the body with
// the webhook's secret token; CircleCI tells receivers to deduplicate on
// the payload's `id`.
func init() {
	register(&Preset{
		Name: "circleci",
		Docs: []string{
			"https://circleci.com/docs/guides/integration/outbound-webhooks/",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:circleci-signature separator , prefix v1=
		}`,
		DefaultKey: []string{"json:id", "body"},
	})
}
