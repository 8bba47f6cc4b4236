package providers

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Stone Open Banking (docs/providers.md: Stone): the body is
// `{"encrypted_body":"<compact JWE>"}`, a JWE `RSA-OAEP-256`/`A256GCM`
// encrypted to the partner's RSA key around a JWS `RS256` signed with one
// of Stone's keys, chosen by `kid` from Stone's key set (stone_keyset.go).
// The verified content is the event, which gives the key and, with
// `decrypt`, the body handed on.
func init() {
	register(&Preset{
		Name: "stone",
		Docs: []string{
			"https://docs.openbank.stone.com.br/docs/guias/webhook/",
		},
		// built by provisionStone: its key set is fetched and shared
		DefaultKey: []string{"header:x-stone-webhook-event-id", "body"},
		scheme:     scheme{provision: provisionStone, options: optKeyMaterial},
		TTL:        2 * day, // 50 attempts over the day, at no fixed times
		// the JWS signs the event (the body key's bytes) but not the event
		// id header: that key is guarded.
		// An event is one resource's JSON, a few KB, wrapped in a JWS and a
		// JWE (about 1.8 times its size): 1MiB holds events of 550 KB, and
		// bounds what a forged delivery (anyone can encrypt to the
		// partner's key) costs to decrypt (docs/providers.md: Stone).
		MaxBody: 1 << 20,
		signer: presetSigner{
			needs: "--private-key (Stone's RSA signing key), --encrypt-to (the partner's RSA public key), --kid",
			build: func(cfg SignConfig) (signature.Signer, error) {
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
			},
		},
	})
}

// provisionStone builds Stone's scheme: the partner's private key, and
// the shared key set of jwks_file or jwks_url (default: production).
func provisionStone(ctx caddy.Context, cfg VerifyConfig) (*Verification, error) {
	if len(cfg.Secrets) > 0 || cfg.Header != "" || cfg.Prefix != "" || cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" || cfg.Tolerance != 0 {
		return nil, errors.New("stone verification takes private_key, jwks_url or jwks_file and decrypt, no secret, header, prefix, algorithm, encoding, url or tolerance")
	}
	if cfg.PrivateKey == "" {
		return nil, errors.New("stone verification needs private_key: the PEM of the partner application's RSA private key (or `verify off`)")
	}
	repl := caddy.NewReplacer()
	pemText, err := repl.ReplaceOrErr(cfg.PrivateKey, true, true)
	if err != nil {
		return nil, fmt.Errorf("resolving private_key: %v", err)
	}
	key, err := parseRSAPrivateKey(pemText)
	if err != nil {
		return nil, fmt.Errorf("invalid private_key: %v", err)
	}
	url, file := signature.StoneProductionKeys, ""
	if cfg.JWKSFile != "" {
		if file, err = repl.ReplaceOrErr(cfg.JWKSFile, true, true); err != nil {
			return nil, fmt.Errorf("resolving jwks_file: %v", err)
		}
	} else if cfg.JWKSURL != "" {
		if url, err = repl.ReplaceOrErr(cfg.JWKSURL, true, true); err != nil {
			return nil, fmt.Errorf("resolving jwks_url: %v", err)
		}
		if err := cfparse.CheckHTTPURL("jwks_url", url); err != nil {
			return nil, err
		}
	}
	keys, err := keyset.Load(ctx.Logger(), url, file)
	if err != nil {
		return nil, err
	}
	v, err := signature.NewStone(key, keys.KeySet)
	if err != nil {
		keys.Release()
		return nil, fmt.Errorf("stone verification: %v", err)
	}
	return &Verification{
		Verifier:   v,
		opener:     v,
		decrypt:    cfg.Decrypt,
		retryAfter: keyset.RetryAfter,
		release:    keys.Release,
	}, nil
}

// parseRSAPrivateKey parses the first PEM block, PKCS #1 or PKCS #8, as an
// RSA private key of at least 2048 bits. Errors never quote the key.
func parseRSAPrivateKey(text string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return nil, errors.New("no PEM block (want a PRIVATE KEY or RSA PRIVATE KEY block)")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, errors.New("the PEM block does not parse as a private key")
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key")
	}
	if rk.N.BitLen() < 2048 {
		return nil, fmt.Errorf("an RSA key of %d bits; at least 2048 are needed", rk.N.BitLen())
	}
	return rk, nil
}
