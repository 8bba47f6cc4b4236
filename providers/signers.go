package providers

import (
	"crypto"
	"errors"
	"fmt"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// How each preset signs a delivery, for `caddy webhook-idempotency send`
// and the tests that send as a provider does: the signing counterpart of
// each declaration, built from package signature's signers. A preset
// without a signer cannot be sent, and TestEveryPresetSigns says so.

// SignConfig is the key material a delivery is signed with.
type SignConfig struct {
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
	// TokenQuery is the query parameter of eventgrid's key (the route's
	// `verify eventgrid { query … }`), instead of TokenHeader.
	TokenQuery string
	// WebhookID is PayPal's webhook id, which it signs (the route's
	// `webhook_id`).
	WebhookID string
	// Claims are claims of a JSON Web Token a jwt preset sends, beside
	// those its block checks (Pub/Sub's service account `email`).
	Claims map[string]string
}

// presetSigner builds the signer of one preset.
type presetSigner struct {
	// needs names the key material the preset signs with, for the
	// command's list and errors.
	needs string
	build func(cfg SignConfig) (signature.Signer, error)

	// none, instead of a signer, says why no delivery of the preset can
	// be signed (Pix's proof is the PSP's TLS client certificate).
	none string
}

// Key material a preset signs with.
const (
	needsSecret     = "--secret"
	needsPrivateKey = "--private-key (Ed25519)"
	needsRSAKey     = "--private-key (RSA)"
	needsStandard   = "--secret (whsec_…) or --private-key (Ed25519, v1a)"
)

// NewSigner builds the signer of a preset, or says why it cannot.
func NewSigner(preset string, cfg SignConfig) (signature.Signer, error) {
	p, ok := presets[preset]
	if !ok {
		return nil, fmt.Errorf("unknown preset %q: want one of %s", preset, strings.Join(Names(), ", "))
	}
	if p.signer.build == nil {
		if p.signer.none != "" {
			return nil, fmt.Errorf("the %s preset cannot be signed by this command: %s", preset, p.signer.none)
		}
		return nil, fmt.Errorf("the %s preset cannot be signed by this command", preset)
	}
	s, err := p.signer.build(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", preset, err)
	}
	return s, nil
}

// SignerNeeds names the key material a preset signs with ("" when it has
// no signer).
func SignerNeeds(preset string) string {
	if p, ok := presets[preset]; ok {
		return p.signer.needs
	}
	return ""
}

// secretSigner is the signer of a preset that signs with a shared secret.
func secretSigner(newSigner func(secret string) signature.Signer) presetSigner {
	return presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
		return withSecret(cfg, newSigner)
	}}
}

// withSecret builds a signer that needs the secret.
func withSecret(cfg SignConfig, newSigner func(secret string) signature.Signer) (signature.Signer, error) {
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
func standardSigner(prefix string) presetSigner {
	return presetSigner{needs: needsStandard, build: func(cfg SignConfig) (signature.Signer, error) {
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
	}}
}

// tokenSigner is the signer of a preset that sends a configured token in
// one header.
func tokenSigner(preset, header string) presetSigner {
	return presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
		if cfg.Secret == "" {
			return nil, errors.New(preset + " signs with --secret")
		}
		return signature.NewTokenSigner(header, "", cfg.Secret)
	}}
}
