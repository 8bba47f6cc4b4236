package providers

// Polar: Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
// `webhook-signature: v1,<base64>`) over `{id}.{timestamp}.{body}`, keyed
// with the endpoint's `whsec_…` secret as Polar generated it: decoded for
// secrets made from 2026-09-08, used as written, prefix and all, for the
// older ones. Both keys are tried.
func init() {
	register(&Preset{
		Name: "polar",
		Docs: []string{
			"https://polar.sh/docs/integrate/webhooks/delivery",
			"https://github.com/polarsource/polar/blob/c6c3645e639ee8eeaa05aa0835cf8e39e330382f/server/polar/webhook/tasks.py",
			"https://github.com/polarsource/polar/blob/c6c3645e639ee8eeaa05aa0835cf8e39e330382f/sdk/python/polar/webhooks.py",
		},
		Block: `template {
			string          "{header.webhook-id}.{header.webhook-timestamp}.{body}"
			algorithm       hmac-sha256
			signature       header:webhook-signature separator " " prefix v1, encoding base64
			timestamp       header:webhook-timestamp
			secret_encoding whsec raw
		}`,
		DefaultKey: []string{"header:webhook-id", "body"},
		Volatile:   []string{"webhook-signature", "webhook-timestamp"},
		Signed:     []string{"header:webhook-id"},
	})
}
