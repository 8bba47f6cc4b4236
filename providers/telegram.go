package providers

// Telegram Bot API: no signature; `X-Telegram-Bot-Api-Secret-Token` is the
// `secret_token` given to setWebhook, compared in constant time. An update
// is resent with its `update_id` until it is answered or expires (24 h).
func init() {
	register(&Preset{
		Name: "telegram",
		Docs: []string{
			"https://core.telegram.org/bots/api#setwebhook",
			"https://github.com/tdlib/telegram-bot-api/blob/01a3679c0bbf9bbba03d1d3e20f621fa4becddcc/telegram-bot-api/WebhookActor.cpp",
		},
		DefaultKey:   []string{"json:update_id", "body"},
		scheme:       fixedToken("X-Telegram-Bot-Api-Secret-Token"),
		BodyUnsigned: true,
		Credentials:  []string{"X-Telegram-Bot-Api-Secret-Token"},
		signer:       tokenSigner("telegram", "X-Telegram-Bot-Api-Secret-Token"),
	})
}
