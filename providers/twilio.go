package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// Twilio: `X-Twilio-Signature` over the public URL and the sorted form
// parameters (docs/providers.md: Twilio); the signed URL carries the query.
func init() {
	register(&Preset{
		Name: "twilio",
		Docs: []string{
			"https://www.twilio.com/docs/usage/webhooks/webhooks-security",
			"https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides",
		},
		DefaultKey:  []string{"header:I-Twilio-Idempotency-Token", "body"},
		scheme:      withPublicURL(signature.NewTwilio),
		Signed:      []string{"query:*"},
		Credentials: []string{"X-Twilio-Signature"},
		resigns:     always,
		signer: presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
			return withSecret(cfg, func(s string) signature.Signer { return signature.NewTwilioSigner(s, cfg.PublicURL) })
		}},
	})
}
