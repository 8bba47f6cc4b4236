package providers

// Telnyx (API v2 webhooks): `telnyx-signature-ed25519`, the Ed25519
// signature (base64) of `{telnyx-timestamp}|{body}` made with Telnyx's
// key; the route verifies with the account's public key (Mission Control,
// Keys & Credentials, Public Key: base64 of 32 bytes).
func init() {
	register(&Preset{
		Name: "telnyx",
		Docs: []string{
			"https://developers.telnyx.com/development/api-fundamentals/webhooks/receiving-webhooks",
			"https://developers.telnyx.com/docs/messaging/messages/receiving-webhooks",
			"https://developers.telnyx.com/docs/voice/programmable-voice/receiving-webhooks",
			"https://github.com/team-telnyx/telnyx-node/blob/master/src/lib/webhooks.ts",
			"https://github.com/team-telnyx/telnyx-go/blob/main/lib/webhook_verification.go",
		},
		Block: `template {
			string    "{header.Telnyx-Timestamp}|{body}"
			algorithm ed25519
			signature header:Telnyx-Signature-Ed25519 encoding base64
			timestamp header:Telnyx-Timestamp
		}`,
		// the event's id; messaging bodies carry meta.attempt, which
		// changes between attempts
		DefaultKey: []string{"json:data.id", "body"},
		Volatile:   []string{"Telnyx-Signature-Ed25519", "Telnyx-Timestamp"},
	})
}
