package providers

// Wise: `X-Signature-SHA256`, an RSA PKCS #1 v1.5 SHA-256 signature of the
// body in base64, with Wise's key (one for production, one for the
// sandbox), given as public_key: Wise's production key is published on its
// event-handling page, which this module does not copy (docs/providers.md:
// More presets). Retried 25 times over about 15 days.
func init() {
	register(&Preset{
		Name: "wise",
		Docs: []string{
			"https://docs.wise.com/guides/developer/webhooks/event-handling",
			"https://docs.wise.com/api-docs/features/webhooks-notifications",
			"https://github.com/transferwise/digital-signatures-examples/tree/c29c3625cbf2afe571b045cea2fd1a5d99764f6b/verify-webhook-signature",
		},
		Block: `template {
			string    "{body}"
			algorithm rsa-sha256
			signature header:X-Signature-SHA256 encoding base64
		}`,
		// one delivery UUID per notification (whether a redelivery keeps
		// it is not written: docs/providers.md, More presets)
		DefaultKey: []string{"header:X-Delivery-Id", "body"},
		// 1, 2, 4 … 1024 minutes, then 14 daily retries: 15.4 days
		TTL: 16 * day,
	})
}
