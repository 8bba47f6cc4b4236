package providers

// Calendly webhook subscriptions: `Calendly-Webhook-Signature:
// t=<unix>,v1=<hex>`, the HMAC-SHA256 of `{t}.{body}` with the
// subscription's signing key used as written. Calendly retries for 24
// hours and does not say whether a retry is signed anew, so the tolerance
// covers the retry window (docs/providers.md: Calendly).
func init() {
	register(&Preset{
		Name: "calendly",
		Docs: []string{
			"https://developer.calendly.com/api-docs/overview/webhooks/webhook-signatures",
			"https://developer.calendly.com/docs/webhooks/overview",
			"https://developer.calendly.com/api-docs/overview/webhooks/webhook-errors",
			"https://developer.calendly.com/api-docs/overview/webhooks/webhook-timeouts",
		},
		Block: `template {
			string    "{timestamp}.{body}"
			algorithm hmac-sha256
			signature header:Calendly-Webhook-Signature separator , prefix v1=
			timestamp header:Calendly-Webhook-Signature separator , prefix t=
			tolerance 24h
		}`,
		// no event id: `payload.uri` is shared by an invitee's created and
		// canceled events
		DefaultKey: []string{"body"},
		Volatile:   []string{"Calendly-Webhook-Signature"},
		// an invitee's links to cancel or reschedule, which work for
		// whoever holds them
		Redact: []string{"json:payload.cancel_url", "json:payload.reschedule_url"},
	})
}
