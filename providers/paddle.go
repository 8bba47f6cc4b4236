package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Paddle Billing: `Paddle-Signature: ts=…;h1=…`, HMAC-SHA256 hex of
// `{ts}:{body}`.
func init() {
	register(&Preset{
		Name:    "paddle",
		Timeout: 5 * time.Second,
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
		// every notification is of an event of its own: its id and time
		examples: &examplesRule{
			header: map[string]string{"Content-Type": "application/json"},
			newID:  randomID("ntf_", 13),
			fresh:  []freshMember{{"event_id", quotedID(randomID("evt_", 13))}, {"occurred_at", rfc3339Micro}},
		},
	})
}
