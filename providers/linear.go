package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// Linear: `Linear-Signature`, HMAC-SHA256 hex of the body; the body's
// `webhookTimestamp` is checked only with `tolerance`. Linear-Delivery is
// outside the body's HMAC: that key is guarded.
func init() {
	register(&Preset{
		Name: "linear",
		Docs: []string{
			"https://linear.app/developers/webhooks",
		},
		DefaultKey:  []string{"header:Linear-Delivery", "body"},
		scheme:      withTolerance(signature.NewLinear),
		Addresses:   &AddressList{URL: "https://linear.app/.well-known/appspecific/app.linear.ips.json", Field: "ips"},
		Credentials: []string{"Linear-Signature"},
		signer:      secretSigner(signature.NewLinearSigner),
	})
}
