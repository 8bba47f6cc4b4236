package providers

// Nylas (API v3): `x-nylas-signature`, the HMAC-SHA256 hex of the body with
// the webhook's secret; Nylas tells receivers to deduplicate on the
// notification's `id`, and checks an endpoint with a GET `?challenge=`
// answered at the edge.
func init() {
	register(&Preset{
		Name: "nylas",
		Docs: []string{
			"https://developer.nylas.com/docs/developer-guide/v3-webhooks/",
			"https://developer.nylas.com/docs/reference/api/webhook-notifications/post-webhook-destinations/",
			"https://developer.nylas.com/docs/cookbook/use-cases/build/retry-failed-webhooks/",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Nylas-Signature
		}`,
		DefaultKey: []string{"json:id", "body"},
		Handshake:  &challengeEcho,
	})
}
