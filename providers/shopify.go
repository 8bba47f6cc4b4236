package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Shopify: `X-Shopify-Hmac-Sha256` (Events deliveries: `Shopify-Hmac-Sha256`),
// HMAC-SHA256 base64 of the body. Webhooks send X-Shopify-* headers,
// Events deliveries shopify-* headers (docs/providers.md: Shopify).
func init() {
	register(&Preset{
		Name:    "shopify",
		Timeout: 5 * time.Second,
		Docs: []string{
			"https://shopify.dev/docs/apps/build/webhooks/subscribe/https",
			"https://shopify.dev/docs/apps/build/webhooks/ignore-duplicates",
		},
		DefaultKey: []string{"header:X-Shopify-Event-Id", "header:X-Shopify-Webhook-Id", "header:shopify-webhook-id", "body"},
		scheme: scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
			return signature.NewShopify(cfg.Secrets), nil
		}},
		Credentials: []string{"X-Shopify-Hmac-Sha256", "Shopify-Hmac-Sha256"},
		resigns:     always,
		signer:      secretSigner(signature.NewShopifySigner),
	})
}
