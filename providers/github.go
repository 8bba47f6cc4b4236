package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body;
// the delivery GUID in `X-GitHub-Delivery` is kept by a redelivery but is
// not signed (the replay guard covers it).
func init() {
	register(&Preset{
		Name:    "github",
		Timeout: 10 * time.Second, // github.com records a delivery answered after 10 s as failed
		Docs: []string{
			"https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries",
			"https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries",
			"https://docs.github.com/en/rest/meta/meta",
			"https://docs.github.com/en/webhooks/webhook-events-and-payloads#payload-cap",
		},
		DefaultKey: []string{"header:X-GitHub-Delivery", "body"},
		// "Payloads are capped at 25 MB" (Webhook events and payloads:
		// Payload cap), and GitHub never retries a 413
		MaxBody: 25 << 20,
		scheme:  bodyHMAC("X-Hub-Signature-256", "sha256=", signature.Hex),
		// the meta API's hooks ranges
		Addresses:   &AddressList{URL: "https://api.github.com/meta", Field: "hooks"},
		Credentials: []string{"X-Hub-Signature-256", "X-Hub-Signature"},
		resigns:     always,
		signer:      bodyHMACSigner("X-Hub-Signature-256", "sha256="),
		// https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers
		examples: &examplesRule{
			eventHeader: "X-GitHub-Event",
			header:      map[string]string{"Content-Type": "application/json"},
			newID:       uuidV4,
		},
	})
}
