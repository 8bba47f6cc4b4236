package providers

// Cal.com: `X-Cal-Signature-256`, the HMAC-SHA256 hex of the body with the
// webhook's secret (`no-secret-provided` when none is set, which never
// verifies). A booking event carries no id of the delivery: the body is
// the key.
func init() {
	register(&Preset{
		Name: "calcom",
		Docs: []string{
			"https://cal.com/docs/core-features/webhooks",
			"https://github.com/calcom/cal.com/blob/869be581acee93b8f5db97374627a6f0775fe0c1/packages/features/webhooks/lib/sendPayload.ts",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Cal-Signature-256
		}`,
		DefaultKey: []string{"body"},
	})
}
