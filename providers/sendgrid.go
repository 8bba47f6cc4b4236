package providers

// Twilio SendGrid's Signed Event Webhook: an ECDSA P-256 signature
// (base64 DER) of `{X-Twilio-Email-Event-Webhook-Timestamp}{body}`,
// verified with the account's verification key; the body is an array of
// events, each with its own `sg_event_id`.
func init() {
	register(&Preset{
		Name: "sendgrid",
		Docs: []string{
			"https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features",
			"https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/event",
			"https://github.com/sendgrid/docs/blob/develop/content/docs/for-developers/tracking-events/troubleshooting.md",
			"https://github.com/sendgrid/docs/issues/2933",
			"https://github.com/sendgrid/sendgrid-go/tree/v3.16.1/helpers/eventwebhook",
		},
		// SendGrid documents no freshness window for its timestamp, nor
		// whether a retry is signed anew; none is checked, so a retry
		// signed at the first attempt is not refused (docs/providers.md:
		// SendGrid)
		Block: `template {
			string    "{header.X-Twilio-Email-Event-Webhook-Timestamp}{body}"
			algorithm ecdsa-p256-sha256
			signature header:X-Twilio-Email-Event-Webhook-Signature encoding base64 format der
		}`,
		// a batch: its events each carry sg_event_id, "unique for every
		// event" (troubleshooting, duplicate events), by which each is
		// deduplicated
		DefaultKey: []string{"body"},
		Batch:      &Batch{Path: "json:#", Key: []string{"json:sg_event_id", "body"}},
		// retried "for up to 24 hours after the event occurs", duplicates
		// seen over 29 hours (sendgrid/docs#2933)
		TTL:      2 * day,
		Volatile: []string{"X-Twilio-Email-Event-Webhook-Signature", "X-Twilio-Email-Event-Webhook-Timestamp"},
	})
}
