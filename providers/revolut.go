package providers

// Revolut (Merchant and Business APIs): `Revolut-Signature: v1=<hex>`, a
// comma-separated list while signing secrets rotate, of the HMAC-SHA256 of
// `v1.{Revolut-Request-Timestamp}.{body}` (milliseconds) with the
// webhook's signing secret; 5 minutes' tolerance, as Revolut advises.
func init() {
	register(&Preset{
		Name: "revolut",
		Docs: []string{
			"https://developer.revolut.com/docs/guides/accept-payments/tutorials/work-with-webhooks/verify-the-payload-signature",
			"https://developer.revolut.com/docs/guides/manage-accounts/webhooks/verify-the-payload-signature",
			"https://developer.revolut.com/docs/api/merchant/tags/tag-webhooks",
			"https://developer.revolut.com/docs/business/webhooks-v-2",
		},
		Block: `template {
			string    "v1.{header.Revolut-Request-Timestamp}.{body}"
			algorithm hmac-sha256
			signature header:Revolut-Signature separator , prefix v1=
			timestamp header:Revolut-Request-Timestamp unit ms
		}`,
		// a Merchant API event has no id, and the same bytes on a retry
		DefaultKey: []string{"body"},
		Volatile:   []string{"Revolut-Signature", "Revolut-Request-Timestamp"},
	})
}
