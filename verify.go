package webhookidempotency

import (
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The handler's side of verification: the scheme is its `verify` block's
// or its preset's, built by package providers, which knows every provider
// and generic scheme.

// provisionVerifier builds the verification from the provider and the
// verify block, resolving their placeholders.
func (h *Handler) provisionVerifier(ctx caddy.Context) error {
	cfg := providers.VerifyConfig{}
	if h.Verify != nil {
		cfg = *h.Verify
	}
	if cfg.Scheme == "" {
		cfg.Scheme = h.Provider
	}
	v, err := providers.Provision(ctx, cfg)
	if err != nil {
		return err
	}
	h.verification = v
	return nil
}

// scheme is the name of the handler's verification scheme: its `verify`
// scheme, else its preset's ("" while neither is given).
func (h *Handler) scheme() string {
	if h.Verify != nil && h.Verify.Scheme != "" {
		return h.Verify.Scheme
	}
	return h.Provider
}

// warnVerifyConfig logs, at provision, configurations that work but will
// not do what their author most likely wants. It never rejects them.
func (h *Handler) warnVerifyConfig() {
	scheme := h.scheme()
	for _, k := range h.Key {
		name, ok := strings.CutPrefix(k, "header:")
		if !ok {
			continue
		}
		if preset, volatile := providers.VolatileHeader(name, scheme); volatile {
			p, _ := providers.Lookup(preset)
			h.logger.Warn("the key header changes on every delivery attempt (the provider signs each attempt with a new timestamp), so retries will not be deduplicated; key on the provider's stable event id instead",
				zap.String("header", name),
				zap.String("provider", preset),
				zap.Strings("use_instead", p.DefaultKey))
		}
	}
}

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
