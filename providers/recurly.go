package providers

// Recurly: `recurly-signature: <t>,<sig>[,<sig>]`, a timestamp in
// milliseconds then HMAC-SHA256 hex signatures (two while a secret
// rotates) of `{t}.{body}` with the endpoint's secret; retried for about
// three days.
func init() {
	register(&Preset{
		Name: "recurly",
		Docs: []string{
			"https://docs.recurly.com/recurly-subscriptions/docs/signature-verification",
			"https://docs.recurly.com/recurly-subscriptions/docs/automatic-retries",
			"https://github.com/recurly/recurly-client-go/blob/e35e39075944ba9131ad0427bbeb1f2964103d60/webhook.go",
		},
		Block: `template {
			string    "{timestamp}.{body}"
			algorithm hmac-sha256
			signature header:recurly-signature separator , skip 1
			timestamp header:recurly-signature separator , unit ms
		}`,
		DefaultKey: []string{"json:id", "body"},
		// 10 retries, the x-th about 10 + x·2^(x+5) s after the previous: 72.9 h
		TTL:      4 * day,
		Volatile: []string{"recurly-signature"},
	})
}
