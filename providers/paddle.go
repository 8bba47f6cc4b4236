package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// Paddle Billing: `Paddle-Signature: ts=…;h1=…`, HMAC-SHA256 hex of
// `{ts}:{body}`.
func init() {
	register(&Preset{
		Name: "paddle",
		Docs: []string{
			"https://developer.paddle.com/webhooks/signature-verification",
			"https://developer.paddle.com/webhooks/respond-to-webhooks",
		},
		DefaultKey:  []string{"json:notification_id", "body"},
		scheme:      withTolerance(signature.NewPaddle),
		Volatile:    []string{"Paddle-Signature"},
		TTL:         3 * day, // live: up to 60 retries over 3 days
		Credentials: []string{"Paddle-Signature"},
		resigns:     always,
		signer:      secretSigner(signature.NewPaddleSigner),
	})
}
