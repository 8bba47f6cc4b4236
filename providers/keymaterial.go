package providers

import (
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// KeyMaterial is what a verification scheme verifies with
// (docs/providers.md: Public keys).
type KeyMaterial uint8

const (
	SecretKeys              KeyMaterial = iota // shared secrets (`secret`)
	Ed25519Keys                                // Ed25519 public keys (`public_key`)
	RSAKeys                                    // RSA public keys (`public_key`)
	StandardKeys                               // Standard Webhooks: whsec_ secrets, whpk_ public keys, or both
	JWTKeys                                    // a jwt: secrets, or a key set (jwks_url, jwks_file)
	TemplateKeys                               // a template: secrets for an HMAC, else public keys or cert_url
	PublicKeysOrCertificate                    // public keys, or a certificate URL the preset declares
)

// KeyMaterialOf is the key material of a scheme, and whether the scheme
// works without any (a default key, or nothing to verify).
func KeyMaterialOf(name string) (KeyMaterial, bool) {
	s, _ := schemeOf(name)
	return s.keys, s.keysOptional
}

// checkKeyMaterial checks that a verify config gives the key material its
// scheme verifies with, and no other.
func checkKeyMaterial(cfg VerifyConfig) error {
	kind, optional := KeyMaterialOf(cfg.Scheme)
	switch kind {
	case JWTKeys:
		if len(cfg.PublicKeys) > 0 {
			return fmt.Errorf("%s verifies with secrets or a key set (jwks_url, jwks_file): it takes no public_key", cfg.Scheme)
		}
		if len(cfg.Secrets) == 0 && cfg.JWKSURL == "" && cfg.JWKSFile == "" {
			return fmt.Errorf("%s verification needs secrets, jwks_url or jwks_file (or `verify off`)", cfg.Scheme)
		}
		return nil
	case TemplateKeys:
		if cfg.templateSymmetric() {
			kind = SecretKeys
		} else {
			kind, optional = PublicKeysOrCertificate, cfg.CertURL != nil
		}
	}
	switch kind {
	case PublicKeysOrCertificate:
		if len(cfg.Secrets) > 0 {
			return fmt.Errorf("%s verifies with a public key: give public_key, not secret", cfg.Scheme)
		}
		if len(cfg.PublicKeys) == 0 && !optional {
			return fmt.Errorf("%s verification needs at least one public_key (or `verify off`)", cfg.Scheme)
		}
	case Ed25519Keys, RSAKeys:
		if len(cfg.Secrets) > 0 {
			return fmt.Errorf("%s verifies with a public key: give public_key, not secret", cfg.Scheme)
		}
		if len(cfg.PublicKeys) == 0 && !optional {
			return fmt.Errorf("%s verification needs at least one public_key (or `verify off`)", cfg.Scheme)
		}
	case StandardKeys:
		if len(cfg.Secrets) == 0 && len(cfg.PublicKeys) == 0 {
			return fmt.Errorf("%s verification needs at least one secret or public_key (or `verify off`)", cfg.Scheme)
		}
	default:
		if len(cfg.PublicKeys) > 0 {
			return fmt.Errorf("%s verifies with a shared secret: it takes no public_key", cfg.Scheme)
		}
		if len(cfg.Secrets) == 0 && !optional {
			return fmt.Errorf("%s verification needs at least one secret (or `verify off`)", cfg.Scheme)
		}
	}
	return nil
}

// CheckPublicKey is the rule of a `public_key` value for a scheme: it must
// parse as the scheme's kind of key. A value with a placeholder is checked
// once Provision has resolved it. The Caddyfile parser and Provision both
// call it.
func CheckPublicKey(name, value string) error {
	if cfparse.HasPlaceholder(value) {
		return nil
	}
	var err error
	switch kind, _ := KeyMaterialOf(name); kind {
	case Ed25519Keys, StandardKeys:
		_, err = signature.ParseEd25519PublicKey(value)
	case RSAKeys:
		_, err = signature.ParseRSAPublicKey(value)
	case TemplateKeys:
		// the block's algorithm may come after its keys: the template
		// parses them, by its algorithm, when it is built
	case PublicKeysOrCertificate:
		// a preset declared as a block: its algorithm's kind of key
		err = signature.CheckTemplatePublicKey(presets[name].decl.templateAlgorithm(), value)
	default:
		err = errors.New("the scheme verifies with a shared secret (give secret)")
	}
	return err
}

// resolvePublicKeys resolves the placeholders of public keys (such as
// `{file./etc/keys/discord.pem}`); errors name the option.
func resolvePublicKeys(values []string) ([]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	repl := caddy.NewReplacer()
	out := make([]string, len(values))
	for i, v := range values {
		r, err := repl.ReplaceOrErr(v, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving public_key %d: %v", i+1, err)
		}
		if r == "" {
			return nil, fmt.Errorf("public_key %d is empty after resolving placeholders", i+1)
		}
		out[i] = r
	}
	return out, nil
}

// parseEd25519Keys parses resolved public keys; errors name the option.
func parseEd25519Keys(values []string) ([]ed25519.PublicKey, error) {
	return parseKeys(values, signature.ParseEd25519PublicKey)
}

// parseRSAKeys parses resolved public keys; errors name the option.
func parseRSAKeys(values []string) ([]*rsa.PublicKey, error) {
	return parseKeys(values, signature.ParseRSAPublicKey)
}

// parseKeys parses each value with parse; errors name the option.
func parseKeys[K any](values []string, parse func(string) (K, error)) ([]K, error) {
	keys := make([]K, len(values))
	for i, v := range values {
		k, err := parse(v)
		if err != nil {
			return nil, fmt.Errorf("public_key %d: %v", i+1, err)
		}
		keys[i] = k
	}
	return keys, nil
}

// whpkKeys writes resolved Ed25519 public keys in the Standard Webhooks
// form, `whpk_` and base64, as the Standard Webhooks scheme takes them.
func whpkKeys(values []string) ([]string, error) {
	keys, err := parseEd25519Keys(values)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "whpk_" + base64.StdEncoding.EncodeToString(k)
	}
	return out, nil
}

// newEd25519Verifier builds the generic `ed25519` scheme.
func newEd25519Verifier(cfg VerifyConfig) (signature.Verifier, error) {
	enc, err := signatureEncoding(cfg, signature.Hex)
	if err != nil {
		return nil, err
	}
	if cfg.Algorithm != "" || cfg.Padding != "" {
		return nil, errors.New("ed25519 takes no algorithm or padding")
	}
	keys, err := parseEd25519Keys(cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	return signature.NewEd25519(cfg.Header, cfg.Prefix, enc, keys)
}

// newRSAVerifier builds the generic `rsa` scheme. Its encoding defaults
// to base64, the way RSA signatures are usually sent.
func newRSAVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	enc, err := signatureEncoding(cfg, signature.Base64)
	if err != nil {
		return nil, err
	}
	h, err := rsaHash(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	padding, err := ParsePadding(cfg.Padding)
	if err != nil {
		return nil, err
	}
	keys, err := parseRSAKeys(cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	return signature.NewRSA(cfg.Header, cfg.Prefix, h, padding, enc, keys)
}
