package providers

// Typeform: `Typeform-Signature: sha256=<base64>`, the HMAC-SHA256 of the
// body keyed with the `secret` set on the webhook.
func init() {
	register(&Preset{
		Name: "typeform",
		Docs: []string{
			"https://www.typeform.com/developers/webhooks/secure-your-webhooks/",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:Typeform-Signature prefix sha256= encoding base64
		}`,
		DefaultKey: []string{"json:event_id", "body"},
	})
}
