package webhookidempotency

import (
	"crypto"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// How each preset signs a delivery, for `caddy webhook-idempotency send`
// (command_send.go): the signing counterpart of the preset table
// (providers.go), built from package signature's signers. A preset of the
// table that has no entry here cannot be sent, and TestEveryPresetSigns
// says so.

// signConfig is the key material a delivery is signed with.
type signConfig struct {
	// Secret is the shared secret (a preset's `secret`).
	Secret string
	// PrivateKey is a private key, as text (PEM, hex or base64): the
	// Ed25519 key of discord and of standard/svix `v1a`, the RSA key of
	// woovi, Stone's RSA signing key.
	PrivateKey string
	// EncryptTo is the partner's RSA public key Stone encrypts to: the
	// public half of the route's private_key.
	EncryptTo string
	// KeyID is the kid of Stone's signing key in the route's key set.
	KeyID string
	// PublicURL is the URL the provider was told to deliver to, for the
	// presets that sign it (the route's `url`); "" for the URL sent to.
	PublicURL string
	// TokenHeader is the header of evolution's token mode (the route's
	// `verify evolution { header … }`); "" for its JWT.
	TokenHeader string
}

// presetSigner builds the signer of one preset.
type presetSigner struct {
	// needs names the key material the preset signs with, for the
	// command's list and errors.
	needs string
	build func(cfg signConfig) (signature.Signer, error)
}

// Key material a preset signs with.
const (
	needsSecret     = "--secret"
	needsPrivateKey = "--private-key (Ed25519)"
	needsRSAKey     = "--private-key (RSA)"
	needsStoneKeys  = "--private-key (Stone's RSA signing key), --encrypt-to (the partner's RSA public key), --kid"
	needsStandard   = "--secret (whsec_…) or --private-key (Ed25519, v1a)"
)

// presetSigners maps each preset to its signer.
var presetSigners = map[string]presetSigner{
	"stripe":  secretSigner(signature.NewStripeSigner),
	"github":  bodyHMACSigner("X-Hub-Signature-256", "sha256="),
	"shopify": secretSigner(signature.NewShopifySigner),
	"slack":   secretSigner(signature.NewSlackSigner),
	"standard": {needs: needsStandard, build: func(cfg signConfig) (signature.Signer, error) {
		return standardSigner("webhook-", cfg)
	}},
	"svix": {needs: needsStandard, build: func(cfg signConfig) (signature.Signer, error) {
		return standardSigner("svix-", cfg)
	}},
	"whatsapp":    bodyHMACSigner("X-Hub-Signature-256", "sha256="),
	"ifood":       bodyHMACSigner("X-IFood-Signature", ""),
	"mercadopago": secretSigner(signature.NewMercadoPagoSigner),
	"pagbank":     secretSigner(signature.NewPagBankSigner),
	"paddle":      secretSigner(signature.NewPaddleSigner),
	"twilio": {needs: needsSecret, build: func(cfg signConfig) (signature.Signer, error) {
		return withSecret(cfg, func(s string) signature.Signer { return signature.NewTwilioSigner(s, cfg.PublicURL) })
	}},
	"square": {needs: needsSecret, build: func(cfg signConfig) (signature.Signer, error) {
		return withSecret(cfg, func(s string) signature.Signer { return signature.NewSquareSigner(s, cfg.PublicURL) })
	}},
	"gitlab": {needs: needsSecret + " (a token, or a whsec_ signing token)", build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.Secret == "" {
			return nil, errors.New("gitlab signs with --secret")
		}
		return signature.NewGitLabSigner(cfg.Secret)
	}},
	"stone": {needs: needsStoneKeys, build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.PrivateKey == "" || cfg.EncryptTo == "" {
			return nil, errors.New("stone deliveries are signed with Stone's RSA key and encrypted to the partner's public key: give --private-key (a signing key whose public half the route's jwks_file holds under --kid) and --encrypt-to (the public half of the route's private_key)")
		}
		key, err := signature.ParseRSAPrivateKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %v", err)
		}
		partner, err := signature.ParseRSAPublicKey(cfg.EncryptTo)
		if err != nil {
			return nil, fmt.Errorf("--encrypt-to: %v", err)
		}
		return signature.NewStoneSigner(key, cfg.KeyID, partner)
	}},
	"evolution": {needs: needsSecret + " (the jwt_key, or with --token-header the token)", build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.Secret == "" {
			return nil, errors.New("evolution signs with --secret")
		}
		if cfg.TokenHeader != "" {
			return signature.NewTokenSigner(cfg.TokenHeader, "", cfg.Secret)
		}
		return signature.NewJWTSigner("", "", cfg.Secret, map[string]any{"app": "evolution", "action": "webhook"})
	}},
	"asaas": {needs: needsSecret, build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.Secret == "" {
			return nil, errors.New("asaas signs with --secret")
		}
		return signature.NewTokenSigner("asaas-access-token", "", cfg.Secret)
	}},
	"discord": {needs: needsPrivateKey, build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.PrivateKey == "" {
			return nil, errors.New("discord signs with the application's Ed25519 key, which only Discord holds: give --private-key, a key whose public half is the route's public_key")
		}
		key, err := signature.ParseEd25519PrivateKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %v", err)
		}
		return signature.NewDiscordSigner(key), nil
	}},
	"twitch":   secretSigner(signature.NewTwitchSigner),
	"zoom":     secretSigner(signature.NewZoomSigner),
	"linear":   secretSigner(signature.NewLinearSigner),
	"razorpay": bodyHMACSigner("X-Razorpay-Signature", ""),
	"woovi": {needs: needsRSAKey, build: func(cfg signConfig) (signature.Signer, error) {
		if cfg.PrivateKey == "" {
			return nil, errors.New("woovi signs with its RSA key, which only Woovi holds: give --private-key, a key whose public half is the route's public_key")
		}
		key, err := signature.ParseRSAPrivateKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %v", err)
		}
		return signature.NewWooviSigner(key), nil
	}},
	// Efí signs nothing: the skip-mTLS token goes in the URL's hmac
	// parameter (with mutual TLS, the client certificate is the proof,
	// which this command does not present)
	"efi": {needs: needsSecret + " (the hmac token of Efí's fallback without mutual TLS)", build: func(cfg signConfig) (signature.Signer, error) {
		return withSecret(cfg, func(s string) signature.Signer { return signature.NewQueryTokenSigner(efiHMACParam, s) })
	}},
	"hubspot": {needs: needsSecret, build: func(cfg signConfig) (signature.Signer, error) {
		return withSecret(cfg, func(s string) signature.Signer { return signature.NewHubSpotSigner(s, cfg.PublicURL) })
	}},
}

// secretSigner is the signer of a preset that signs with a shared secret.
func secretSigner(newSigner func(secret string) signature.Signer) presetSigner {
	return presetSigner{needs: needsSecret, build: func(cfg signConfig) (signature.Signer, error) {
		return withSecret(cfg, newSigner)
	}}
}

// withSecret builds a signer that needs the secret.
func withSecret(cfg signConfig, newSigner func(secret string) signature.Signer) (signature.Signer, error) {
	if cfg.Secret == "" {
		return nil, errors.New("this preset signs with --secret")
	}
	return newSigner(cfg.Secret), nil
}

// bodyHMACSigner is the signer of a preset that signs the body with an
// HMAC-SHA256 in hex (bodyHMAC's counterpart).
func bodyHMACSigner(header, prefix string) presetSigner {
	return secretSigner(func(secret string) signature.Signer {
		s, _ := signature.NewHMACSigner(header, prefix, crypto.SHA256, signature.Hex, secret)
		return s
	})
}

// standardSigner is Standard Webhooks' signer: `v1` with a whsec_ secret,
// `v1a` with an Ed25519 private key.
func standardSigner(prefix string, cfg signConfig) (signature.Signer, error) {
	switch {
	case cfg.PrivateKey != "":
		key, err := signature.ParseEd25519PrivateKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %v", err)
		}
		return signature.NewStandardWebhooksEd25519Signer(prefix, key), nil
	case cfg.Secret != "":
		return signature.NewStandardWebhooksSigner(prefix, cfg.Secret)
	}
	return nil, errors.New("give --secret (whsec_…) or --private-key (an Ed25519 key, for v1a)")
}

// newPresetSigner builds the signer of a preset, or says why it cannot.
func newPresetSigner(preset string, cfg signConfig) (signature.Signer, error) {
	if _, ok := providers[preset]; !ok {
		return nil, fmt.Errorf("unknown preset %q: want one of %s", preset, strings.Join(signablePresets(), ", "))
	}
	ps, ok := presetSigners[preset]
	if !ok {
		return nil, fmt.Errorf("the %s preset cannot be signed by this command", preset)
	}
	s, err := ps.build(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", preset, err)
	}
	return s, nil
}

// signablePresets lists the presets of the table, sorted.
func signablePresets() []string {
	names := make([]string, 0, len(providers))
	for name := range providers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
