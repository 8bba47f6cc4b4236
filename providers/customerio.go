package providers

// Customer.io reporting webhooks: `X-CIO-Signature`, the HMAC-SHA256 hex of
// `v0:{X-CIO-Timestamp}:{body}` with the webhook's signing secret. No age
// is checked (Customer.io's client checks none, and retries for 7 days):
// a route that wants one writes the template with a timestamp.
func init() {
	register(&Preset{
		Name: "customerio",
		Docs: []string{
			"https://docs.customer.io/api/webhooks/",
			"https://github.com/customerio/customerio-node/blob/b0288a456fd58b806093b85d4c9b4f4298d54032/lib/webhooks.ts",
		},
		Block: `template {
			string    "v0:{header.X-CIO-Timestamp}:{body}"
			algorithm hmac-sha256
			signature header:X-CIO-Signature
		}`,
		DefaultKey: []string{"json:event_id", "body"},
		// retried for 7 days, 4xx included
		TTL:         7 * day,
		Volatile:    []string{"X-CIO-Signature", "X-CIO-Timestamp"},
		Credentials: []string{"X-CIO-Signature", "X-CIO-Timestamp"},
	})
}
