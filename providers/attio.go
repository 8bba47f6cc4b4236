package providers

// Attio: `Attio-Signature` (also sent as `X-Attio-Signature`), the
// HMAC-SHA256 hex of the body with the webhook's secret; `Idempotency-Key`
// is the same across retries and redeliveries of a message, which Attio
// retries for about 3 days.
func init() {
	register(&Preset{
		Name: "attio",
		Docs: []string{
			"https://docs.attio.com/rest-api/how-to/webhooks",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:Attio-Signature
		}`,
		DefaultKey:  []string{"header:Idempotency-Key", "body"},
		TTL:         4 * day,
		Credentials: []string{"Attio-Signature", "X-Attio-Signature"},
	})
}
