package providers

// PagerDuty (V3 webhook subscriptions): `X-PagerDuty-Signature: v1=<hex>`,
// a comma-separated list (several while a secret rotates) of HMAC-SHA256
// of the body with the subscription's secret.
func init() {
	register(&Preset{
		Name: "pagerduty",
		Docs: []string{
			"https://developer.pagerduty.com/docs/ZG9jOjExMDI5NTkz-verifying-signatures",
			"https://github.com/PagerDuty/go-pagerduty/blob/v1.8.0/webhookv3/webhookv3.go",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-PagerDuty-Signature separator , prefix v1=
		}`,
		DefaultKey: []string{"json:event.id", "body"},
	})
}
