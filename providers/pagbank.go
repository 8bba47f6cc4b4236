package providers

import "github.com/webhookguard/caddy-webhook-idempotency/signature"

// PagBank (PagSeguro): `x-authenticity-token`, SHA-256 hex of
// `{token}-{body}` (a digest, not an HMAC).
func init() {
	register(&Preset{
		Name: "pagbank",
		Docs: []string{
			"https://developer.pagbank.com.br/docs/webhooks",
		},
		DefaultKey: []string{"body"},
		scheme: scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
			return signature.NewPagBank(cfg.Secrets), nil
		}},
		Credentials: []string{"x-authenticity-token"},
		resigns:     always,
		signer:      secretSigner(signature.NewPagBankSigner),
	})
}
