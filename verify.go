package webhookidempotency

import (
	"cmp"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// VerifyConfig configures signature verification (README: Providers and
// signature verification).
type VerifyConfig struct {
	// The verification scheme: a provider preset name (`stripe`,
	// `github`, …), `hmac`, `token`, `jwt`, `ed25519` or `rsa` for the
	// generic schemes, or `off`.
	// Default: the handler's provider, if any; else no verification.
	Scheme string `json:"scheme,omitempty"`

	// Secrets to verify with. A signature valid under any of them is
	// accepted (rotation). Placeholders such as `{env.X}` and
	// `{file./run/secrets/x}` are resolved at provision time.
	Secrets []string `json:"secrets,omitempty"`

	// Public keys to verify with, for the schemes that check a signature
	// made with a private key: `discord`, `woovi`, `ed25519`, `rsa`, and
	// the `v1a` signatures of `standard` and `svix`. Each is PEM, base64 or
	// hex (Standard Webhooks' `whpk_…` too); a signature valid under any of
	// them is accepted (rotation). Placeholders such as
	// `{file./etc/keys/x.pem}` are resolved at provision time, and a key
	// that does not parse is a provision error. Default: none; `woovi`:
	// Woovi's published key.
	PublicKeys []string `json:"public_keys,omitempty"`

	// The header that carries the signature or token. Default: the
	// scheme's own header (`Authorization` for `jwt`); required for
	// `hmac`, `token`, `ed25519` and `rsa`. With `evolution`, a header
	// selects the token mode (default: Evolution's JWT in `Authorization`).
	Header string `json:"header,omitempty"`

	// The hash: for `hmac`, `sha1`, `sha256` or `sha512`; for `rsa`,
	// `sha256` or `sha512`. Default: `sha256`.
	Algorithm string `json:"algorithm,omitempty"`

	// How the signature of `hmac`, `ed25519` or `rsa` is written: `hex`
	// or `base64`. Default: `hex`; `base64` for `rsa`.
	Encoding string `json:"encoding,omitempty"`

	// The padding of `rsa` signatures: `pkcs1` (PKCS #1 v1.5) or `pss`.
	// Default: `pkcs1`.
	Padding string `json:"padding,omitempty"`

	// A prefix in front of the `hmac` signature or the `token`, such as
	// `sha256=` or `Bearer `. When set, a header value without it is
	// rejected. Default: none (`Bearer `, in any case, for `jwt`).
	Prefix string `json:"prefix,omitempty"`

	// How far a signed timestamp may be from the current time, for the
	// schemes that sign one; for `jwt`, the leeway on `exp`, `nbf` and
	// `iat`. Default: 5m; for `mercadopago`, no check.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`

	// The public URL the provider signs, for schemes that sign the URL
	// (`twilio`, `square`, `hubspot`). The query string of the request is appended
	// unless this URL has one. Placeholders such as `{env.X}` are
	// resolved at provision time. Default: reconstructed from the
	// request: its Host and path, `https` when it came over TLS, and
	// `X-Forwarded-Proto`/`X-Forwarded-Host` only when the server marks
	// the request as coming from one of its `trusted_proxies`.
	URL string `json:"url,omitempty"`

	// The partner application's RSA private key, PEM (PKCS #1 or #8),
	// for `stone`: the pair of the public key registered with Stone,
	// usually `{file./run/secrets/stone.pem}`. Placeholders are resolved
	// at provision, where a key that does not parse is an error.
	// Required for `stone`.
	PrivateKey string `json:"private_key,omitempty"`

	// The URL of Stone's signing key set, fetched at provision, cached,
	// refreshed hourly and shared across reloads (docs/providers.md:
	// Stone). Default: Stone's production discovery URL,
	// `https://api.openbank.stone.com.br/api/v1/discovery/keys`.
	JWKSURL string `json:"jwks_url,omitempty"`

	// A file holding Stone's signing key set, instead of jwks_url.
	// Default: none.
	JWKSFile string `json:"jwks_file,omitempty"`

	// Hand the verified event JSON to the next handler as the body,
	// instead of Stone's encrypted envelope, with `Content-Type:
	// application/json` and its Content-Length. Default: false (the
	// raw body is passed on).
	Decrypt bool `json:"decrypt,omitempty"`
}

// verifySchemes lists the generic schemes besides the provider presets.
var verifySchemes = map[string]bool{"hmac": true, "token": true, "jwt": true, "ed25519": true, "rsa": true, "off": true}

// knownScheme reports whether name is a verification scheme.
func knownScheme(name string) bool {
	_, isProvider := providers[name]
	return isProvider || verifySchemes[name]
}

// provisionVerifier builds the verifier from the provider and the verify
// block, resolving secret placeholders.
func (h *Handler) provisionVerifier(ctx caddy.Context) error {
	cfg := VerifyConfig{}
	if h.Verify != nil {
		cfg = *h.Verify
	}
	if cfg.Scheme == "" {
		cfg.Scheme = h.Provider
	}
	if cfg.Scheme == "" {
		if len(cfg.Secrets) > 0 {
			return errors.New("secret given without a provider or verify scheme")
		}
		return nil
	}
	if cfg.Scheme == "off" {
		return nil
	}
	if !knownScheme(cfg.Scheme) {
		return fmt.Errorf("unknown verify scheme %q", cfg.Scheme)
	}
	if err := checkStoneOptions(cfg.Scheme, cfg); err != nil {
		return err
	}
	if cfg.Scheme == "stone" {
		return h.provisionStone(ctx, cfg)
	}
	repl := caddy.NewReplacer()
	secrets := make([]string, 0, len(cfg.Secrets))
	for i, s := range cfg.Secrets {
		v, err := repl.ReplaceOrErr(s, true, true)
		if err != nil {
			return fmt.Errorf("resolving secret %d: %v", i+1, err)
		}
		if v == "" {
			return fmt.Errorf("secret %d is empty after resolving placeholders", i+1)
		}
		secrets = append(secrets, v)
	}
	cfg.Secrets = secrets
	if err := checkKeyMaterial(cfg); err != nil {
		return err
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return fmt.Errorf("%s verification: %v", cfg.Scheme, err)
	}
	h.verifier = v
	return nil
}

// newVerifier builds the verifier of a scheme; cfg has its secrets
// resolved. A tolerance of zero is the default (5m). Errors never contain a
// secret.
func newVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.URL != "" {
		u, err := caddy.NewReplacer().ReplaceOrErr(cfg.URL, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving url: %v", err)
		}
		if err := checkHTTPURL("url", u); err != nil {
			return nil, err
		}
		cfg.URL = u
	}
	var err error
	if cfg.PublicKeys, err = resolvePublicKeys(cfg.PublicKeys); err != nil {
		return nil, err
	}
	switch cfg.Scheme {
	case "hmac":
		return newHMACVerifier(cfg)
	case "token":
		return newTokenVerifier(cfg)
	case "jwt":
		return newJWTVerifier(cfg)
	case "ed25519":
		return newEd25519Verifier(cfg)
	case "rsa":
		return newRSAVerifier(cfg)
	}
	p, ok := providers[cfg.Scheme]
	if !ok || p.verifier == nil {
		return nil, fmt.Errorf("unknown verify scheme %q", cfg.Scheme)
	}
	if err := p.checkOptions(cfg); err != nil {
		return nil, err
	}
	return p.verifier(cfg)
}

// newHMACVerifier builds the generic `hmac` scheme.
func newHMACVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	enc, err := signatureEncoding(cfg, signature.Hex)
	if err != nil {
		return nil, err
	}
	if cfg.Padding != "" {
		return nil, errors.New("hmac takes no padding")
	}
	h, err := hashFunc(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	return signature.NewHMAC(cfg.Header, cfg.Prefix, h, enc, cfg.Secrets)
}

// newTokenVerifier builds the generic `token` scheme.
func newTokenVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.Header == "" {
		return nil, errors.New("a header is required (header <name> in the verify block)")
	}
	if cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" || cfg.Padding != "" {
		return nil, errors.New("a token takes no algorithm, encoding, padding or url")
	}
	return signature.NewToken(cfg.Header, cfg.Prefix, cfg.Secrets)
}

// newJWTVerifier builds the generic `jwt` scheme: HS256, in
// `Authorization: Bearer` unless a header and prefix are given.
func newJWTVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" {
		return nil, errors.New("a jwt takes no algorithm (HS256 only), encoding or url")
	}
	return signature.NewJWT(cfg.Header, cfg.Prefix, cfg.Secrets, time.Duration(cfg.Tolerance))
}

// hashFunc maps an `algorithm` value to its hash (default: sha256).
func hashFunc(name string) (crypto.Hash, error) {
	return keywords[crypto.Hash]{
		{"sha1", crypto.SHA1}, {"sha256", crypto.SHA256}, {"sha512", crypto.SHA512},
	}.parse("algorithm", cmp.Or(name, "sha256"))
}

// parseEncoding maps an `encoding` value to how a signature is written
// (default: hex).
func parseEncoding(name string) (signature.Encoding, error) {
	return keywords[signature.Encoding]{
		{"hex", signature.Hex}, {"base64", signature.Base64},
	}.parse("encoding", cmp.Or(name, "hex"))
}

// publicURL is the URL the schemes that sign one (`twilio`, `square`,
// `hubspot`) check: cfg.URL, resolved at provision, else the request's.
func (cfg VerifyConfig) publicURL() signature.PublicURL {
	configured := cfg.URL
	return func(dst []byte, r *http.Request) []byte {
		return appendPublicURL(dst, r, configured)
	}
}

// appendPublicURL appends the public URL of r: the configured one (with
// the request's query string when it has none), else the URL rebuilt from
// the request. X-Forwarded-Proto and X-Forwarded-Host are honoured only
// when the server marked the request as coming from a trusted proxy
// (`trusted_proxies`); otherwise any client could choose the URL that is
// checked.
func appendPublicURL(dst []byte, r *http.Request, configured string) []byte {
	uri := requestURI(r)
	if configured != "" {
		dst = append(dst, configured...)
		if !strings.Contains(configured, "?") {
			if _, query, ok := strings.Cut(uri, "?"); ok {
				dst = append(append(dst, '?'), query...)
			}
		}
		return dst
	}
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if p := firstListItem(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstListItem(r.Header.Get("X-Forwarded-Host")); h != "" {
			host = h
		}
	}
	dst = append(append(append(dst, scheme...), "://"...), host...)
	return append(dst, uri...)
}

// requestURI is the path and query the client asked for, before any
// rewrite.
func requestURI(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.RequestURI != "" {
		return originForm(orig.RequestURI)
	}
	if r.RequestURI != "" {
		return originForm(r.RequestURI)
	}
	return r.URL.RequestURI()
}

// originForm returns the path and query of a request target, which a
// client may send in absolute form (`http://host/path?query`).
func originForm(uri string) string {
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	if u, err := url.ParseRequestURI(uri); err == nil {
		return u.RequestURI()
	}
	return uri
}

// firstListItem is the first element of a comma-separated header value.
func firstListItem(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}
