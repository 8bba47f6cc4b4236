package providers

// LINE Messaging API: `x-line-signature`, the HMAC-SHA256 base64 of the
// body with the channel secret. A request holds events, each with a
// `webhookEventId`; a redelivered event carries `isRedelivery: true`, so
// the body changes while the id does not (docs/providers.md: More
// presets).
func init() {
	register(&Preset{
		Name: "line",
		Docs: []string{
			"https://developers.line.biz/en/docs/messaging-api/receiving-messages/",
			"https://developers.line.biz/en/docs/messaging-api/verify-webhook-url/",
			"https://developers.line.biz/en/docs/messaging-api/check-webhook-error-statistics/",
			"https://github.com/line/line-bot-sdk-go/blob/v8.14.0/linebot/webhook/parse.go",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Line-Signature encoding base64
		}`,
		// each event by its webhookEventId, which a redelivery keeps while
		// it changes the body (docs/providers.md: LINE); a request with no
		// events (the console's check) by its first event's id, else its
		// body
		DefaultKey: []string{"json:events.0.webhookEventId", "body"},
		Batch:      &Batch{Path: "json:events", Key: []string{"json:webhookEventId"}},
		// a message event's token to reply as the bot
		Redact: []string{"json:events.#.replyToken"},
	})
}
