package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The handler's Caddyfile options for public keys and handshakes
// (docs/providers.md: Public keys, Handshakes), with the rules of
// keymaterial.go and handshake.go.

// parseKeyOption parses `public_key <key>...`, `verify_token <token>` and
// `handshake on|off` in the handler's block or on its line.
func (h *Handler) parseKeyOption(d *caddyfile.Dispenser, name string, args []string) error {
	what := "'" + name + "'"
	if name == "public_key" {
		return h.addPublicKeys(d, what, args)
	}
	v, err := oneValue(d, what, args)
	if err != nil {
		return err
	}
	token, handshake := h.VerifyToken, h.Handshake
	if name == "verify_token" {
		token = v
	} else {
		handshake = v
	}
	if err := checkHandshakeOptions(h.Provider, handshake, token); err != nil {
		return d.Errf("%v", err)
	}
	h.VerifyToken, h.Handshake = token, handshake
	return nil
}

// addPublicKeys adds `public_key` values to the verify config, checking
// those without placeholders against the scheme when it is known by then.
func (h *Handler) addPublicKeys(d *caddyfile.Dispenser, what string, keys []string) error {
	if err := someValues(d, what, keys); err != nil {
		return err
	}
	if h.Verify == nil {
		h.Verify = new(VerifyConfig)
	}
	scheme := h.Verify.Scheme
	if scheme == "" {
		scheme = h.Provider
	}
	if scheme != "" && scheme != "off" {
		for i, k := range keys {
			if err := checkPublicKey(scheme, k); err != nil {
				return d.Errf("invalid public_key %d for %s: %v", len(h.Verify.PublicKeys)+i+1, scheme, err)
			}
		}
	}
	h.Verify.PublicKeys = append(h.Verify.PublicKeys, keys...)
	return nil
}
