package providers

// OpenAI delivers "following the Standard Webhooks specification":
// webhook-id, webhook-timestamp and webhook-signature over
// `{id}.{timestamp}.{body}`, keyed with the project's `whsec_…` secret; the
// message id, signed with the body, is the key.
func init() {
	register(standardSender("openai", []string{
		"https://developers.openai.com/ja-JP/api/docs/guides/webhooks",
		"https://github.com/openai/openai-go/blob/4e5a07a6a205761650d73593fe75cd79ea7a25ec/webhooks/webhook_helpers.go",
	}))
}
