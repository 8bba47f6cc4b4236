package providers

// WorkOS: `WorkOS-Signature: t=<ms>, v1=<hex>`, the HMAC-SHA256 of
// `{t}.{body}` with the endpoint's secret used as written; WorkOS's SDKs
// allow 180 s.
func init() {
	register(&Preset{
		Name: "workos",
		Docs: []string{
			"https://workos.com/docs/events/data-syncing/webhooks",
			"https://github.com/workos/workos-go/blob/27a5c270ebbcab1794aeebd7e1e5bfa65dbb9877/webhook_verification.go",
		},
		Block: `template {
			string    "{timestamp}.{body}"
			algorithm hmac-sha256
			signature header:WorkOS-Signature separator , prefix v1=
			timestamp header:WorkOS-Signature separator , prefix t= unit ms
			tolerance 3m
		}`,
		DefaultKey: []string{"json:id", "body"},
		Volatile:   []string{"WorkOS-Signature"},
	})
}
