package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Coinbase: `coinbase` is the Coinbase Developer Platform's webhooks (CDP
// Wallets, Onramp, Transfers, Coinbase Business payment links), sent by
// Hook0: `X-Hook0-Signature: t=…,h=…,v1=…` over the headers `h` names and
// the body, with the subscription's secret; `X-Event-Id` is the event's
// id, and the preset requires v1 to cover it. `coinbase_commerce` is the
// Coinbase Commerce charges API's `X-CC-Webhook-Signature`, an HMAC-SHA256
// hex of the body with the endpoint's shared secret (docs/providers.md:
// Coinbase).
func init() {
	register(&Preset{
		Name: "coinbase",
		Docs: []string{
			"https://docs.cdp.coinbase.com/data/webhooks/verify-signatures",
			"https://docs.cdp.coinbase.com/webhooks/payment-acceptance/verification",
			"https://docs.cdp.coinbase.com/get-started/webhooks",
			"https://github.com/hook0/hook0/blob/master/output-worker/src/work.rs",
			"https://github.com/hook0/hook0/blob/master/clients/go/signature.go",
		},
		DefaultKey: []string{"header:X-Event-Id", "body"},
		// Coinbase says up to 60 retries and no window; 8 days is Hook0's
		// default window
		TTL:         8 * day,
		scheme:      scheme{build: newCoinbaseVerifier},
		Volatile:    []string{"X-Hook0-Signature"},
		Signed:      []string{"header:X-Event-Id"},
		Credentials: []string{"X-Hook0-Signature"},
		resigns:     always,
		signer: presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
			return signature.NewHook0Signer("", cfg.Secret, coinbaseSigned)
		}},
	})
	register(&Preset{
		Name: "coinbase_commerce",
		Docs: []string{
			"https://docs.cloud.coinbase.com/commerce/docs/webhooks-security",
			"https://docs.cdp.coinbase.com/coinbase-business/payment-link-apis/migrate/overview",
			"https://github.com/coinbase/coinbase-commerce-node/blob/master/lib/Webhook.js",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-CC-Webhook-Signature
		}`,
		// the event's id; the body's id, attempt_number and scheduled_for
		// are the attempt's
		DefaultKey: []string{"json:event.id", "body"},
		// exponential backoff for up to 3 days, at most an hour apart
		TTL: 4 * day,
	})
}

// coinbaseSigned are the headers a CDP delivery's v1 covers (Hook0 signs
// every header it sends; Coinbase's examples show these three).
var coinbaseSigned = []string{"Content-Type", "X-Event-Id", "X-Event-Type"}

// newCoinbaseVerifier is Hook0's scheme requiring X-Event-Id, the
// preset's key, to be signed.
func newCoinbaseVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	return signature.NewHook0(signature.Hook0Config{
		Secrets:   cfg.Secrets,
		Tolerance: time.Duration(cfg.Tolerance),
		Require:   []string{"X-Event-Id"},
	})
}
