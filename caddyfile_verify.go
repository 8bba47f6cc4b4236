package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

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
	return v.UnmarshalBlock(d, h.scheme())
}

// setVerifyOption applies one of the verify options the handler's block
// takes as well as the verify block (secret, public_key, private_key,
// jwks_url, jwks_file, decrypt, issuer, audience, claim), its values
// checked by the parser (v is the first).
func (h *Handler) setVerifyOption(name, v string, args []string) error {
	if h.Verify == nil {
		h.Verify = new(providers.VerifyConfig)
	}
	return h.Verify.SetOption(name, v, args, h.scheme())
}
