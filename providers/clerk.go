package providers

// Clerk delivers through Svix: its backend SDK requires svix-id,
// svix-timestamp and svix-signature and checks them as Standard Webhooks
// (verifyWebhook).
func init() {
	register(svixSender("clerk", []string{
		"https://clerk.com/docs/guides/development/webhooks/syncing",
		"https://github.com/clerk/javascript/blob/0f62bc3c7d721ef1491484254002d988fa146130/packages/backend/src/webhooks.ts",
	}))
}
