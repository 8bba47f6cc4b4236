package providers

// Checkout.com: `Cko-Signature`, the HMAC-SHA256 hex of the body keyed
// with the signature key given to the webhook (Dashboard, or the
// workflow's webhook action). Checkout.com resends a failed webhook up to
// eight times, over about 30 hours.
func init() {
	register(&Preset{
		Name: "checkout",
		Docs: []string{
			"https://www.checkout.com/docs/developer-resources/event-notifications/receive-webhooks/configure-your-webhook-server",
			"https://www.checkout.com/docs/workflows",
			"https://www.checkout.com/docs/business-operations/use-the-dashboard/developers/webhooks",
			"https://www.checkout.com/docs/developer-resources/ip-addresses",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:Cko-Signature
		}`,
		DefaultKey: []string{"json:id", "body"},
		// 5m, 10m, 15m, 30m, 1h, 4h, 12h, 12h after each previous attempt
		TTL: 2 * day,
		// production's list; the sandbox's is webhooks-sandbox.txt
		Addresses: &AddressList{URL: "https://checkout.com/docs/public/files/ip-lists/webhooks-live.txt"},
	})
}
