package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// HubSpot: `X-HubSpot-Signature-v3` over
// `{method}{public url}{body}{timestamp}` with
// `X-HubSpot-Request-Timestamp` (ms); HubSpot batches events, so the body
// is the key.
func init() {
	register(&Preset{
		Name: "hubspot",
		Docs: []string{
			"https://developers.hubspot.com/docs/guides/apps/authentication/validating-requests",
		},
		DefaultKey: []string{"body"},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				return signature.NewHubSpot(cfg.Secrets, cfg.publicURL(), time.Duration(cfg.Tolerance)), nil
			},
			options: optURL,
		},
		Volatile: []string{"X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp"},
		// v3 signs the method, the URL with its query, the body and the
		// timestamp
		Signed:      []string{"query:*"},
		Credentials: []string{"X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp", "X-HubSpot-Signature", "X-HubSpot-Signature-Version"},
		resigns:     always,
		signer: presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
			return withSecret(cfg, func(s string) signature.Signer { return signature.NewHubSpotSigner(s, cfg.PublicURL) })
		}},
	})
}
