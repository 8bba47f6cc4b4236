package providers

import (
	"time"

	"errors"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Evolution API: with a header, the token Evolution's instance sends in it
// (its webhook headers); without, the HS256 JWT Evolution sends in
// Authorization when the headers hold a jwt_key (docs/providers.md:
// Evolution API). Neither signs the body.
func init() {
	register(&Preset{
		Name:    "evolution",
		Timeout: 30 * time.Second, // WEBHOOK_REQUEST_TIMEOUT_MS unset (src/config/env.config.ts)
		Docs: []string{
			"https://github.com/EvolutionAPI/evolution-api",
		},
		DefaultKey: []string{"body"},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				if cfg.Header != "" {
					return newTokenVerifier(cfg)
				}
				return newJWTVerifier(cfg)
			},
			options: optHeader | optPrefix,
		},
		// a token, or a JWT over claims alone: no body is signed
		BodyUnsigned: true,
		// the instance's API key, in every delivery
		Redact:      []string{"json:apikey"},
		Credentials: []string{"Authorization"},
		resigns:     jwtMode,
		signer: presetSigner{needs: needsSecret + " (the jwt_key, or with --token-header the token)", build: func(cfg SignConfig) (signature.Signer, error) {
			if cfg.Secret == "" {
				return nil, errors.New("evolution signs with --secret")
			}
			if cfg.TokenHeader != "" {
				return signature.NewTokenSigner(cfg.TokenHeader, "", cfg.Secret)
			}
			return signature.NewJWTSigner("", "", cfg.Secret, map[string]any{"app": "evolution", "action": "webhook"})
		}},
	})
}

// jwtMode is evolution's resigns rule: its JWT, which expires ten minutes
// after it is issued, is issued anew; a configured token is sent as it is.
func jwtMode(cfg VerifyConfig) bool { return cfg.Header == "" }
