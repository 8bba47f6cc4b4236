package providers

import (
	"errors"
	"fmt"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Woovi (OpenPix): `x-webhook-signature`, RSA-SHA256 (PKCS #1 v1.5)
// base64 of the body; Woovi's published public key unless `public_key` is
// given.
func init() {
	register(&Preset{
		Name:    "woovi",
		Timeout: 100 * time.Second,
		Docs: []string{
			"https://developers.woovi.com/docs/webhook/seguranca/webhook-signature-validation",
			"https://developers.openpix.com.br/docs/webhook/webhook-timeout",
		},
		DefaultKey: []string{"body"},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				keys, err := parseRSAKeys(cfg.PublicKeys)
				if err != nil {
					return nil, err
				}
				return signature.NewWoovi(keys)
			},
			keys:         RSAKeys,
			keysOptional: true,
		},
		Credentials: []string{"x-webhook-signature"},
		signer: presetSigner{needs: needsRSAKey, build: func(cfg SignConfig) (signature.Signer, error) {
			if cfg.PrivateKey == "" {
				return nil, errors.New("woovi signs with its RSA key, which only Woovi holds: give --private-key, a key whose public half is the route's public_key")
			}
			key, err := signature.ParseRSAPrivateKey(cfg.PrivateKey)
			if err != nil {
				return nil, fmt.Errorf("--private-key: %v", err)
			}
			return signature.NewWooviSigner(key), nil
		}},
	})
}
