package providers

// Help Scout: `X-HelpScout-Signature`, the HMAC-SHA1 base64 of the body with
// the webhook's secret key. The event's name is in `X-HelpScout-Event` and
// the body is the object as it is: the body is the key.
func init() {
	register(&Preset{
		Name: "helpscout",
		Docs: []string{
			"https://developer.helpscout.com/webhooks",
			"https://developer.helpscout.net/help-desk-api/webhooks/",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha1
			signature header:X-HelpScout-Signature encoding base64
		}`,
		DefaultKey: []string{"body"},
	})
}
