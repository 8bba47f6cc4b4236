package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Square: `x-square-hmacsha256-signature`, HMAC-SHA256 base64 of
// `{notification url}{body}`.
func init() {
	register(&Preset{
		Name:    "square",
		Timeout: 10 * time.Second,
		Docs: []string{
			"https://developer.squareup.com/docs/webhooks/step3validate",
			"https://developer.squareup.com/docs/webhooks/overview",
		},
		DefaultKey:  []string{"json:event_id", "body"},
		scheme:      withPublicURL(signature.NewSquare),
		TTL:         3 * day, // retried for up to 72 hours
		Signed:      []string{"query:*"},
		Credentials: []string{"x-square-hmacsha256-signature"},
		resigns:     always,
		signer: presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
			return withSecret(cfg, func(s string) signature.Signer { return signature.NewSquareSigner(s, cfg.PublicURL) })
		}},
	})
}
