package providers

// Onfido: `X-SHA2-Signature`, the HMAC-SHA256 hex of the body with the
// webhook's token. Onfido's events carry no id: the body is the key.
func init() {
	register(&Preset{
		Name: "onfido",
		Docs: []string{
			"https://documentation.onfido.com/api/manual-webhook-signature-verification",
			"https://github.com/onfido/onfido-node/blob/2b9faecc1ac81d1a625d4ddb86f8e7795668a181/webhook-event-verifier.ts",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-SHA2-Signature
		}`,
		DefaultKey: []string{"body"},
	})
}
