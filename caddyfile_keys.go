package webhookidempotency

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The handler's Caddyfile `verify` block and its options for public keys
// and handshakes (docs/providers.md: Public keys, Handshakes), with the
// rules of verify.go, keymaterial.go and handshake.go.

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

// parseVerify parses `verify <scheme>|off { ... }`; inline, there is no
// block.
func (h *Handler) parseVerify(d *caddyfile.Dispenser, args []string, inline bool) error {
	if len(args) > 1 {
		return d.Errf("verify takes one scheme, got %d arguments", len(args))
	}
	if h.Verify == nil {
		h.Verify = new(VerifyConfig)
	}
	v := h.Verify
	if len(args) == 1 {
		if !knownScheme(args[0]) {
			return d.Errf("unknown verify scheme '%s': want a provider name, hmac, token, jwt, ed25519, rsa or off", args[0])
		}
		v.Scheme = args[0]
	}
	if inline {
		return nil
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		what := "verify '" + name + "'"
		sub := d.RemainingArgs()
		if name == "secret" {
			if err := someValues(d, what, sub); err != nil {
				return err
			}
			v.Secrets = append(v.Secrets, sub...)
			continue
		}
		if name == "public_key" {
			if err := h.addPublicKeys(d, what, sub); err != nil {
				return err
			}
			continue
		}
		if name == "private_key" || name == "jwks_url" || name == "jwks_file" {
			if err := h.parseKeyMaterial(d, name, what, sub); err != nil {
				return err
			}
			continue
		}
		val, err := oneValue(d, what, sub)
		if err != nil && verifyValueOptions[name] {
			return err
		}
		switch name {
		case "header":
			v.Header = val
		case "algorithm":
			if _, err := hashFunc(val); err != nil {
				return d.Errf("%v", err)
			}
			v.Algorithm = val
		case "encoding":
			if _, err := parseEncoding(val); err != nil {
				return d.Errf("%v", err)
			}
			v.Encoding = val
		case "prefix":
			v.Prefix = val
		case "tolerance":
			dur, err := parsePositiveDuration(val)
			if err != nil {
				return d.Errf("invalid tolerance '%s': %v", val, err)
			}
			v.Tolerance = dur
		case "url":
			if err := checkHTTPURL(val); err != nil {
				return d.Errf("invalid url '%s': %v", val, err)
			}
			v.URL = val
		case "padding":
			if _, err := parsePadding(val); err != nil {
				return d.Errf("%v", err)
			}
			v.Padding = val
		default:
			return d.Errf("unrecognized verify subdirective '%s'", name)
		}
	}
	return nil
}

// verifyValueOptions are the verify subdirectives that take one value.
var verifyValueOptions = map[string]bool{
	"header": true, "algorithm": true, "encoding": true, "prefix": true, "tolerance": true, "url": true,
	"padding": true,
}
