package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// Stripe: `Stripe-Signature: t=…,v1=…[,v1=…]`, HMAC-SHA256 hex of
// `{t}.{body}` with the `whsec_…` secret as written; each retry is signed
// anew with a new timestamp and keeps the event's `id`.
func init() {
	register(&Preset{
		Name: "stripe",
		Docs: []string{
			"https://docs.stripe.com/webhooks#verify-events",
			"https://docs.stripe.com/webhooks#automatic-retries",
			"https://docs.stripe.com/ips",
		},
		DefaultKey: []string{"json:id", "body"},
		scheme:     withTolerance(signature.NewStripe),
		Volatile:   []string{"Stripe-Signature"},
		TTL:        3 * day, // live mode retries for up to 3 days
		// a PaymentIntent's, SetupIntent's or Checkout Session's client secret
		Redact:      []string{"json:data.object.client_secret"},
		Addresses:   &AddressList{URL: "https://stripe.com/files/ips/ips_webhooks.json", Field: "WEBHOOKS"},
		Credentials: []string{"Stripe-Signature"},
		resigns:     always,
		signer:      secretSigner(signature.NewStripeSigner),
		// every event is a new object: its id and creation time
		examples: &examplesRule{
			header: map[string]string{"Content-Type": "application/json; charset=utf-8"},
			newID:  randomID("evt_", 12),
			fresh:  []freshMember{{"created", unixSeconds}},
		},
	})
}
