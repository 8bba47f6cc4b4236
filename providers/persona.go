package providers

// Persona: `Persona-Signature: t=<s>,v1=<hex>`, the HMAC-SHA256 of
// `{t}.{body}` with the webhook's secret; while a secret rotates the header
// holds two such sets separated by a space, each with its own timestamp.
// `t` is when the request was sent: every attempt is signed anew.
func init() {
	register(&Preset{
		Name: "persona",
		Docs: []string{
			"https://docs.withpersona.com/docs/webhooks-best-practices",
			"https://docs.withpersona.com/api-reference/webhooks/webhooks-account-events/webhook-account-created",
		},
		Block: `template {
			string    "{timestamp}.{body}"
			algorithm hmac-sha256
			signature header:Persona-Signature sets " " separator , prefix v1=
			timestamp header:Persona-Signature separator , prefix t=
		}`,
		DefaultKey: []string{"json:data.id", "body"},
		Volatile:   []string{"Persona-Signature", "Persona-Webhook-Attempts-Made", "Persona-Webhook-Attempts-Left"},
	})
}
