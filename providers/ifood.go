package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// iFood: `X-IFood-Signature`, HMAC-SHA256 hex of the body with the client
// secret.
func init() {
	register(&Preset{
		Name:    "ifood",
		Timeout: 5 * time.Second,
		Docs: []string{
			"https://developer.ifood.com.br/en-US/docs/guides/modules/events/webhook/",
		},
		DefaultKey:  []string{"json:id", "body"},
		scheme:      bodyHMAC("X-IFood-Signature", "", signature.Hex),
		Credentials: []string{"X-IFood-Signature"},
		resigns:     always,
		signer:      bodyHMACSigner("X-IFood-Signature", ""),
	})
}
