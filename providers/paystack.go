package providers

import "net/http"

// Paystack: `x-paystack-signature`, the HMAC-SHA512 hex of the body keyed
// with the account's secret API key (there is no separate webhook secret).
// Paystack counts only a 200 as received and retries for three days.
func init() {
	register(&Preset{
		Name: "paystack",
		Docs: []string{
			"https://paystack.com/docs/payments/webhooks/",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha512
			signature header:X-Paystack-Signature
		}`,
		// no event id: data.id is the transaction's, shared by its events
		DefaultKey: []string{"body"},
		// live: every 3 minutes 4 times, then hourly for 72 hours
		TTL:     4 * day,
		Success: &Answer{Status: http.StatusOK},
	})
}
