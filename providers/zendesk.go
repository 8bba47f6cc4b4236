package providers

// Zendesk webhooks: `X-Zendesk-Webhook-Signature`, the HMAC-SHA256 base64
// of `{X-Zendesk-Webhook-Signature-Timestamp}{body}` with the webhook's
// signing secret used as written; the invocation id names a delivery and
// its retries.
func init() {
	register(&Preset{
		Name: "zendesk",
		Docs: []string{
			"https://developer.zendesk.com/documentation/webhooks/verifying/",
			"https://developer.zendesk.com/documentation/webhooks/anatomy-of-a-webhook-request/",
		},
		Block: `template {
			string    "{header.X-Zendesk-Webhook-Signature-Timestamp}{body}"
			algorithm hmac-sha256
			signature header:X-Zendesk-Webhook-Signature encoding base64
			timestamp header:X-Zendesk-Webhook-Signature-Timestamp unit rfc3339
		}`,
		DefaultKey: []string{"header:X-Zendesk-Webhook-Invocation-Id", "body"},
		Volatile:   []string{"X-Zendesk-Webhook-Signature", "X-Zendesk-Webhook-Signature-Timestamp"},
	})
}
