package webhookidempotency

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The handler's Caddyfile `verify` block and its options for public keys
// and handshakes (docs/providers.md: Public keys, Handshakes), with the
// rules of verify.go, keymaterial.go and handshake.go.

// setHandshakeOption applies `verify_token <token>` or `handshake on|off`
// from the handler's block or its line.
func (h *Handler) setHandshakeOption(name, v string) error {
	token, handshake := h.VerifyToken, h.Handshake
	if name == "verify_token" {
		token = v
	} else {
		handshake = v
	}
	if err := providers.CheckHandshakeOptions(h.Provider, handshake, token); err != nil {
		return err
	}
	h.VerifyToken, h.Handshake = token, handshake
	return nil
}

// addPublicKeys adds `public_key` values to the verify config, checking
// those without placeholders against the scheme when it is known by then.
func (h *Handler) addPublicKeys(keys []string) error {
	if scheme := h.scheme(); scheme != "" && scheme != "off" {
		for i, k := range keys {
			if err := providers.CheckPublicKey(scheme, k); err != nil {
				return fmt.Errorf("invalid public_key %d for %s: %v", len(h.Verify.PublicKeys)+i+1, scheme, err)
			}
		}
	}
	h.Verify.PublicKeys = append(h.Verify.PublicKeys, keys...)
	return nil
}

// parseVerify parses `verify <scheme>|off { ... }`; inline, there is no
// block.
func (h *Handler) parseVerify(d *caddyfile.Dispenser, args []string, inline bool) error {
	if len(args) > 1 {
		return d.Errf("verify takes one scheme, got %d arguments", len(args))
	}
	if h.Verify == nil {
		h.Verify = new(providers.VerifyConfig)
	}
	v := h.Verify
	if len(args) == 1 {
		if !providers.KnownScheme(args[0]) {
			return d.Errf("unknown verify scheme '%s': want a provider name, hmac, token, jwt, ed25519, rsa or off", args[0])
		}
		v.Scheme = args[0]
	}
	if inline {
		return nil
	}
	return cfparse.Block(d, "verify", verifyBlockOptions, h.setVerifyOption)
}

// verifyBlockOptions are the subdirectives of the verify block and the
// values each takes.
var verifyBlockOptions = map[string]cfparse.Arity{
	"secret": cfparse.Some, "public_key": cfparse.Some, "private_key": cfparse.One, "jwks_url": cfparse.One,
	"jwks_file": cfparse.One, "header": cfparse.One, "algorithm": cfparse.One, "encoding": cfparse.One,
	"prefix": cfparse.One, "tolerance": cfparse.One, "url": cfparse.One, "padding": cfparse.One,
}

// setVerifyOption applies a subdirective of the verify block, or one of
// the verify options the handler's block takes as well (secret,
// public_key, private_key, jwks_url, jwks_file, decrypt), its values
// checked by the parser (v is the first).
func (h *Handler) setVerifyOption(name, v string, args []string) (err error) {
	if h.Verify == nil {
		h.Verify = new(providers.VerifyConfig)
	}
	cfg := h.Verify
	switch name {
	case "secret":
		cfg.Secrets = append(cfg.Secrets, args...)
	case "public_key":
		err = h.addPublicKeys(args)
	case "header":
		cfg.Header = v
	case "algorithm":
		cfg.Algorithm = v
		_, err = providers.HashFunc(v)
	case "encoding":
		cfg.Encoding = v
		_, err = providers.ParseEncoding(v)
	case "prefix":
		cfg.Prefix = v
	case "tolerance":
		cfg.Tolerance, err = cfparse.PositiveDuration("tolerance", v)
	case "url":
		cfg.URL = v
		err = cfparse.CheckHTTPURL("url", v)
	case "padding":
		cfg.Padding = v
		_, err = providers.ParsePadding(v)
	case "private_key":
		cfg.PrivateKey = v
	case "jwks_url":
		cfg.JWKSURL = v
	case "jwks_file":
		cfg.JWKSFile = v
	case "decrypt":
		cfg.Decrypt = true
	}
	if err == nil && providers.IsSealedOption(name) {
		err = providers.CheckSchemeOptions(h.scheme(), *cfg)
	}
	return err
}
