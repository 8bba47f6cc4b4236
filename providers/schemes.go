package providers

import (
	"cmp"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// VerifyConfig configures signature verification (docs/providers.md:
// Providers and signature verification).
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
	// `hmac`, `token` (unless `query` is given), `ed25519` and `rsa`. With
	// `evolution`, a header selects the token mode (default: Evolution's
	// JWT in `Authorization`); with `eventgrid`, it carries the key.
	Header string `json:"header,omitempty"`

	// For `token` and `eventgrid`, instead of a header: the query
	// parameter that carries the token (a secret the sender was given in
	// the URL it delivers to). Default: none.
	Query string `json:"query,omitempty"`

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

	// For `jwt`, the authentication scheme written before the token in
	// its header. Default: `Bearer` in Authorization (or `prefix`), none
	// in another header.
	AuthScheme string `json:"auth_scheme,omitempty"`

	// For `template`: the signed message, as a template over the request
	// (docs/providers.md: Generic schemes): text, `{body}`, `{method}`,
	// `{url}`, `{timestamp}`, `{header.<Name>}`, `{json.<path>}`,
	// `{query.<name>}`, `{body.crc32}`, `{body.sha256}`, escapes such as
	// `\n`, and parts in brackets left out when a field in them is absent.
	// Required.
	String string `json:"string,omitempty"`

	// For `template`, instead of algorithm: the field (`header:<Name>`,
	// `json:<path>`, `query:<name>`) whose value chooses each delivery's
	// algorithm through algorithm_values (Amazon SNS's
	// SignatureVersion). Default: none.
	AlgorithmField string `json:"algorithm_field,omitempty"`

	// For `template`, with algorithm_field: the algorithm of each value
	// the field may hold (Amazon SNS: `1` rsa-sha1, `2` rsa-sha256); a
	// delivery whose value is not listed fails verification. Default:
	// none.
	AlgorithmValues map[string]string `json:"algorithm_values,omitempty"`

	// For `template`: where the signature is and how it is written.
	// Required.
	Signature *SignatureConfig `json:"signature,omitempty"`

	// For `template`: where the signed timestamp is, checked against
	// tolerance. Default: none.
	Timestamp *TimestampConfig `json:"timestamp,omitempty"`

	// For `template`: how the secrets are written, `raw` (used as
	// written), `hex`, `base64`, `whsec` (Standard Webhooks: `whsec_` and
	// base64), `nfkd` (the secret's Unicode NFKD form) or
	// `html_specialchars` (`&amp;`, `&lt;`, … decoded as WordPress decodes
	// a stored secret); several, separated by spaces, make a key of each
	// secret under each encoding that decodes it (`whsec raw`). Default:
	// `raw`.
	SecretEncoding string `json:"secret_encoding,omitempty"`

	// For `template`: the key of each delivery taken from the
	// certificate at the URL the delivery names, fetched only over https
	// from the hosts allowed. Default: none.
	CertURL *CertURLConfig `json:"cert_url,omitempty"`

	// For `template`: `json:<path>` to an array whose items are signed
	// one by one (`#` standing for the array, as in
	// `json:notificationItems.#.NotificationRequestItem`). Default: none.
	Items string `json:"items,omitempty"`

	// For `template`, with items: the most items a delivery may hold;
	// more fails verification. Default: 1000.
	MaxItems int `json:"max_items,omitempty"`

	// For `jwt`: the accepted `iss` values. Default: any.
	Issuers []string `json:"issuers,omitempty"`

	// For `jwt`: the accepted `aud` values; required with a key set.
	Audiences []string `json:"audiences,omitempty"`

	// For `jwt`: the accepted `alg` values (never `none`, never an HMAC
	// algorithm with a key set). Default: HS256 with secrets, RS256 with a
	// key set.
	JWTAlgorithms []string `json:"algorithms,omitempty"`

	// For `jwt`: claims the token must carry, each with one of its
	// values (compared as text); for `template`: members of the body the
	// string signs, by their JSON path, each with one of its values
	// (Amazon SNS's TopicArn). Default: none; `sns` needs its TopicArn.
	Claims map[string][]string `json:"claims,omitempty"`

	// For `paypal`, and a `template` whose string has `{webhook_id}`: the
	// value signed in its place, PayPal's webhook id (the ID of the
	// webhook the listener URL is registered as, in the app's settings),
	// without spaces. Placeholders such as `{env.X}` are resolved at
	// provision time. Default: none; required by those schemes, refused
	// by any other.
	WebhookID string `json:"webhook_id,omitempty"`

	// keySet is the key set of jwks_url or jwks_file, loaded by
	// Provision for a `jwt` scheme.
	keySet *keyset.Set
}

// SignatureConfig is where a template's signature is and how it is
// written.
type SignatureConfig struct {
	// `header:<Name>`, `json:<path>` or `query:<name>`. Required.
	From string `json:"from,omitempty"`
	// Written before the signature (`sha256=`). Default: none.
	Prefix string `json:"prefix,omitempty"`
	// `hex` or `base64`. Default: hex for an HMAC, base64 otherwise.
	Encoding string `json:"encoding,omitempty"`
	// An ECDSA signature's form, `der` or `raw`. Default: der.
	Format string `json:"format,omitempty"`
	// Splits one value into items: several signatures (rotation), or
	// parameters of which those with the prefix are signatures
	// (`t=…,v1=…`). Default: none.
	Separator string `json:"separator,omitempty"`
	// How many items at the start of the value are not signatures
	// (Recurly's `<timestamp>,<sig>`). Default: 0.
	Skip int `json:"skip,omitempty"`
	// Splits one value into sets verified one by one, each with its own
	// signatures and timestamp (Persona's `t=…,v1=… t=…,v1=…`). Default:
	// none.
	Sets string `json:"sets,omitempty"`
}

// TimestampConfig is where a template's signed time is.
type TimestampConfig struct {
	// `header:<Name>`, `json:<path>` or `query:<name>`. Required.
	From string `json:"from,omitempty"`
	// `s`, `ms` or `rfc3339`. Default: s.
	Unit string `json:"unit,omitempty"`
	// Take the timestamp out of a value that holds more: split at the
	// separator, the first item that starts with prefix (`t=` of
	// `t=…,v1=…`), the prefix removed. Default: the whole value.
	Separator string `json:"separator,omitempty"`
	// With separator: what the item that holds the timestamp starts with
	// (`t=`), removed from it. Default: none.
	Prefix string `json:"prefix,omitempty"`
}

// CertURLConfig is where a template's certificate comes from.
type CertURLConfig struct {
	// `header:<Name>` or `json:<path>`: the value that holds the URL.
	// Required.
	From string `json:"from,omitempty"`
	// Anchored regular expressions, one of which the URL's host must
	// match; a URL outside them is refused before any fetch. Required.
	Hosts []string `json:"hosts,omitempty"`
	// Anchored regular expressions, one of which the URL's path must
	// match. Default: any.
	Paths []string `json:"paths,omitempty"`
	// Anchored regular expressions, one of which a DNS name of the
	// certificate (its common name when it has none) must match.
	// Default: any.
	Subjects []string `json:"subjects,omitempty"`
	// What the certificate is trusted for: `chain`, a chain to the
	// system's roots; or `origin`, having come over https from a host
	// `hosts` allows, its dates, names and key still checked (Amazon SNS
	// serves its certificate without its issuer). Default: chain.
	Trust string `json:"trust,omitempty"`
	// How long a fetched certificate is kept, at most until it expires.
	// Default: 24h.
	Cache caddy.Duration `json:"cache,omitempty"`
}

// scheme is how a verification scheme is built: a preset's, or a generic
// one's.
type scheme struct {
	// build builds the verifier from a config whose key material and url
	// are resolved (a zero tolerance is the default); nil with provision.
	build func(cfg VerifyConfig) (signature.Verifier, error)

	// provision replaces build for a scheme that resolves and holds
	// resources of its own (Stone's key set).
	provision func(ctx caddy.Context, cfg VerifyConfig) (*Verification, error)

	// options are the verify subdirectives a preset's scheme takes besides
	// `secret` and `tolerance` (generic schemes check their own).
	options verifyOptions

	// keys is the key material the scheme verifies with (zero: secrets);
	// keysOptional, that the scheme works without any.
	keys         KeyMaterial
	keysOptional bool
}

// verifyOptions is a set of the optional verify subdirectives.
type verifyOptions uint16

const (
	optHeader verifyOptions = 1 << iota
	optPrefix
	optURL
	optKeyMaterial // private_key, jwks_url, jwks_file, decrypt (stone)
	optKeySet      // jwks_url, jwks_file, issuer, audience, algorithms, claim (a jwt)
	optWebhookID   // webhook_id (a template whose string signs {webhook_id})
	optClaims      // claim (a jwt's, or a template's signed members)
	optQuery       // query (a token in the query)
)

// genericSchemes are the schemes besides the presets, by name.
var genericSchemes = map[string]scheme{
	"hmac":     {build: newHMACVerifier},
	"token":    {build: newTokenVerifier},
	"jwt":      {build: newJWTScheme, keys: JWTKeys, options: optKeySet},
	"template": {build: newTemplateVerifier, keys: TemplateKeys},
	"ed25519":  {build: newEd25519Verifier, keys: Ed25519Keys},
	"rsa":      {build: newRSAVerifier, keys: RSAKeys},
}

// KnownScheme reports whether name is a verification scheme: a preset, a
// generic scheme, or `off`.
func KnownScheme(name string) bool {
	_, isPreset := presets[name]
	_, isGeneric := genericSchemes[name]
	return isPreset || isGeneric || name == "off"
}

// schemeOf returns the scheme of a name.
func schemeOf(name string) (scheme, bool) {
	if p, ok := presets[name]; ok {
		return p.scheme, true
	}
	s, ok := genericSchemes[name]
	return s, ok
}

// Verification is a route's provisioned verification: the verifier, and
// what a sealed scheme (Stone's) adds. Release gives back what it holds.
type Verification struct {
	signature.Verifier

	// opener is the verifier of a scheme whose content is sealed.
	opener signature.Opener
	// decrypt hands the opened content on instead of the envelope.
	decrypt bool
	// retryAfter is the Retry-After of a 503 while the scheme's keys are
	// not loaded.
	retryAfter func() string
	release    func()

	// resign signs a delivery again as the scheme does (nil when it
	// cannot), and each verifies with one secret alone, to tell which one
	// verified a delivery (nil with one secret).
	resign func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error
	each   []signature.Verifier
}

// Resigner returns the function that signs a delivery again as the
// route's scheme does, with its secret of an index and a new time; nil when
// the scheme cannot be re-signed (Resigns).
func (v *Verification) Resigner() func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error {
	if v == nil {
		return nil
	}
	return v.resign
}

// SecretIndex returns the index of the route's secret that verifies a
// delivery, for re-signing it with that one: 0 with one secret, or when
// none does (a delivery that was verified by a public key).
func (v *Verification) SecretIndex(r *http.Request, body []byte) int {
	for i, each := range v.each {
		if each.Verify(r, body) == nil {
			return i
		}
	}
	return 0
}

// Open verifies the request and returns its authenticated content when the
// scheme seals it (nil otherwise: the content is the raw body).
func (v *Verification) Open(r *http.Request, body []byte) ([]byte, error) {
	if v.opener == nil {
		return nil, v.Verify(r, body)
	}
	return v.opener.Open(r, body)
}

// Sealed reports whether the scheme seals the content (Open returns it).
func (v *Verification) Sealed() bool { return v.opener != nil }

// Decrypt reports whether the opened content is handed on as the body.
func (v *Verification) Decrypt() bool { return v.decrypt }

// RetryAfter is the Retry-After of a 503 answered while the scheme's keys
// are unavailable (signature.ErrUnavailable).
func (v *Verification) RetryAfter() string {
	if v.retryAfter == nil {
		return "30"
	}
	return v.retryAfter()
}

// Release gives back what the verification holds (a shared key set).
func (v *Verification) Release() {
	if v != nil && v.release != nil {
		v.release()
		v.release = nil
	}
}

// Provision builds the verification of a config: nil for none (no scheme,
// or `off`). Placeholders in its key material and url are resolved here;
// errors never contain a secret.
func Provision(ctx caddy.Context, cfg VerifyConfig) (*Verification, error) {
	if cfg.Scheme == "" {
		if len(cfg.Secrets) > 0 {
			return nil, errors.New("secret given without a provider or verify scheme")
		}
		return nil, nil
	}
	if cfg.Scheme == "off" {
		return nil, nil
	}
	s, ok := schemeOf(cfg.Scheme)
	if !ok {
		return nil, fmt.Errorf("unknown verify scheme %q", cfg.Scheme)
	}
	if err := CheckSchemeOptions(cfg.Scheme, cfg); err != nil {
		return nil, err
	}
	if s.provision != nil {
		return s.provision(ctx, cfg)
	}
	if p, ok := presets[cfg.Scheme]; ok && p.decl != nil {
		// a preset declared as a block: its key set unless the route
		// gives its own
		if cfg.JWKSURL == "" && cfg.JWKSFile == "" {
			cfg.JWKSURL, cfg.JWKSFile = p.decl.JWKSURL, p.decl.JWKSFile
		}
	}
	repl := caddy.NewReplacer()
	secrets := make([]string, 0, len(cfg.Secrets))
	for i, sec := range cfg.Secrets {
		v, err := repl.ReplaceOrErr(sec, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving secret %d: %v", i+1, err)
		}
		if v == "" {
			return nil, fmt.Errorf("secret %d is empty after resolving placeholders", i+1)
		}
		secrets = append(secrets, v)
	}
	cfg.Secrets = secrets
	if cfg.URL != "" {
		u, err := repl.ReplaceOrErr(cfg.URL, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving url: %v", err)
		}
		cfg.URL = u
	}
	if cfg.WebhookID != "" {
		id, err := repl.ReplaceOrErr(cfg.WebhookID, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving webhook_id: %v", err)
		}
		if id == "" {
			return nil, errors.New("webhook_id is empty after resolving placeholders")
		}
		cfg.WebhookID = id
	}
	if err := checkKeyMaterial(cfg); err != nil {
		return nil, err
	}
	var release func()
	if s.options&optKeySet != 0 && (cfg.JWKSURL != "" || cfg.JWKSFile != "") {
		ks, err := loadKeySet(ctx, cfg)
		if err != nil {
			return nil, err
		}
		cfg.keySet, release = ks, ks.Release
	}
	v, err := buildVerifier(cfg)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, fmt.Errorf("%s verification: %v", cfg.Scheme, err)
	}
	if v == nil {
		// a scheme with nothing to verify in this configuration (efi
		// without its token: the client certificate authenticates)
		return nil, nil
	}
	ver := &Verification{Verifier: v, release: release}
	if release != nil {
		ver.retryAfter = keyset.RetryAfter
	}
	if Resigns(cfg) {
		if ver.resign, err = NewResigner(cfg); errors.Is(err, ErrNoResign) {
			// no secret of the route can sign (public keys alone)
			ver.resign = nil
		} else if err != nil {
			return nil, err
		}
		if len(cfg.Secrets) > 1 {
			for _, s := range cfg.Secrets {
				one := cfg
				one.Secrets, one.PublicKeys = []string{s}, nil
				each, err := buildVerifier(one)
				if err != nil {
					return nil, fmt.Errorf("%s verification: %v", cfg.Scheme, err)
				}
				ver.each = append(ver.each, each)
			}
		}
	}
	return ver, nil
}

// buildVerifier builds the verifier of a scheme; cfg has its secrets
// resolved. A tolerance of zero is the default (5m). Errors never contain a
// secret.
func buildVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.URL != "" {
		u, err := caddy.NewReplacer().ReplaceOrErr(cfg.URL, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving url: %v", err)
		}
		if err := cfparse.CheckHTTPURL("url", u); err != nil {
			return nil, err
		}
		cfg.URL = u
	}
	var err error
	if cfg.PublicKeys, err = resolvePublicKeys(cfg.PublicKeys); err != nil {
		return nil, err
	}
	s, ok := schemeOf(cfg.Scheme)
	if !ok || s.build == nil {
		return nil, fmt.Errorf("unknown verify scheme %q", cfg.Scheme)
	}
	if p, isPreset := presets[cfg.Scheme]; isPreset {
		if err := p.checkOptions(cfg); err != nil {
			return nil, err
		}
	} else if cfg.Query != "" && cfg.Scheme != "token" {
		return nil, fmt.Errorf("%s takes no query (a token in the query is `verify token { query <name> }`)", cfg.Scheme)
	}
	return s.build(cfg)
}

// checkOptions rejects verify subdirectives the preset's scheme has no
// use for, rather than silently ignoring them.
func (p *Preset) checkOptions(cfg VerifyConfig) error {
	var bad []string
	for _, name := range cfg.OptionsSet() {
		if !p.takes(name) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the preset takes no %s (the generic hmac, token, jwt, ed25519 and rsa schemes do)", strings.Join(bad, ", "))
	}
	return nil
}

// takes reports whether the preset's scheme takes a verify subdirective
// of OptionsSet.
func (p *Preset) takes(option string) bool {
	o := p.scheme.options
	switch {
	case option == "header":
		return o&optHeader != 0
	case option == "query":
		return o&optQuery != 0
	case option == "prefix":
		return o&optPrefix != 0
	case option == "url":
		return o&optURL != 0
	case option == "jwks_url" || option == "jwks_file":
		return o&(optKeyMaterial|optKeySet) != 0
	case option == "issuer" || option == "audience":
		return o&optKeySet != 0
	case option == "claim":
		return o&(optKeySet|optClaims) != 0
	case sealedOptions[option]:
		return o&optKeyMaterial != 0
	case option == "public_key":
		return p.scheme.keys != SecretKeys
	case option == "webhook_id":
		return o&optWebhookID != 0
	}
	return false
}

// OptionsSet names the verify subdirectives a config sets, besides
// secret and tolerance, in the order errors name them.
func (cfg VerifyConfig) OptionsSet() []string {
	var set []string
	for _, o := range [...]struct {
		name string
		set  bool
	}{
		{"header", cfg.Header != ""},
		{"query", cfg.Query != ""},
		{"prefix", cfg.Prefix != ""},
		{"url", cfg.URL != ""},
		{"private_key", cfg.PrivateKey != ""},
		{"jwks_url", cfg.JWKSURL != ""},
		{"jwks_file", cfg.JWKSFile != ""},
		{"decrypt", cfg.Decrypt},
		{"public_key", len(cfg.PublicKeys) > 0},
		{"padding", cfg.Padding != ""},
		{"algorithm", cfg.Algorithm != "" || cfg.AlgorithmField != ""},
		{"encoding", cfg.Encoding != ""},
		{"string", cfg.String != ""},
		{"signature", cfg.Signature != nil},
		{"timestamp", cfg.Timestamp != nil},
		{"secret_encoding", cfg.SecretEncoding != ""},
		{"cert_url", cfg.CertURL != nil},
		{"items", cfg.Items != ""},
		{"max_items", cfg.MaxItems != 0},
		{"issuer", len(cfg.Issuers) > 0},
		{"audience", len(cfg.Audiences) > 0},
		{"algorithms", len(cfg.JWTAlgorithms) > 0},
		{"claim", len(cfg.Claims) > 0},
		{"webhook_id", cfg.WebhookID != ""},
	} {
		if o.set {
			set = append(set, o.name)
		}
	}
	return set
}

// sealedOptions are the verify options only a scheme that takes key
// material of its own takes (stone).
var sealedOptions = map[string]bool{"private_key": true, "jwks_url": true, "jwks_file": true, "decrypt": true}

// CheckSchemeOptions is the rule of the options only some schemes take,
// for the Caddyfile parser (as they are read; scheme "" while it is not
// known yet) and for Provision: only a scheme with key material of its own
// (stone) takes private_key, jwks_url, jwks_file and decrypt, jwks_url and
// jwks_file exclude each other, and jwks_url is an http(s) URL.
func CheckSchemeOptions(schemeName string, cfg VerifyConfig) error {
	if schemeName != "" && schemeName != "off" {
		s, ok := schemeOf(schemeName)
		for _, name := range cfg.OptionsSet() {
			keySet := name == "jwks_url" || name == "jwks_file"
			switch {
			case keySet && ok && s.options&(optKeyMaterial|optKeySet) != 0:
			case keySet:
				return fmt.Errorf("%s: only the stone and jwt schemes take %s", schemeName, name)
			case sealedOptions[name] && (!ok || s.options&optKeyMaterial == 0):
				return fmt.Errorf("%s: only the stone scheme takes %s", schemeName, name)
			}
		}
	}
	if cfg.JWKSURL != "" && cfg.JWKSFile != "" {
		return errors.New("jwks_url and jwks_file both give a key set: use one")
	}
	if cfg.JWKSURL != "" {
		return cfparse.CheckHTTPURL("jwks_url", cfg.JWKSURL)
	}
	return nil
}

// IsSealedOption reports whether a verify option is one only a scheme
// with key material of its own takes (private_key, jwks_url, jwks_file,
// decrypt).
func IsSealedOption(name string) bool { return sealedOptions[name] }

// newHMACVerifier builds the generic `hmac` scheme.
func newHMACVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	enc, err := signatureEncoding(cfg, signature.Hex)
	if err != nil {
		return nil, err
	}
	if cfg.Padding != "" {
		return nil, errors.New("hmac takes no padding")
	}
	h, err := HashFunc(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	return signature.NewHMAC(cfg.Header, cfg.Prefix, h, enc, cfg.Secrets)
}

// newTokenVerifier builds the generic `token` scheme.
func newTokenVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" || cfg.Padding != "" {
		return nil, errors.New("a token takes no algorithm, encoding, padding or url")
	}
	return headerOrQueryToken(cfg, "")
}

// headerOrQueryToken is a shared token in the header or the query
// parameter cfg names; without either, a header is required (hint says
// what else the scheme takes).
func headerOrQueryToken(cfg VerifyConfig, hint string) (signature.Verifier, error) {
	switch {
	case cfg.Header != "" && cfg.Query != "":
		return nil, errors.New("the token is in a header or in the query: give header or query, not both")
	case cfg.Query != "":
		if cfg.Prefix != "" {
			return nil, errors.New("a token in the query takes no prefix")
		}
		return signature.NewQueryToken(cfg.Query, cfg.Secrets)
	case cfg.Header == "":
		return nil, errors.New("a header is required (header <name> in the verify block), or the query parameter that carries the token (query <name>)" + hint)
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

// HashFunc maps an `algorithm` value to its hash (default: sha256); the
// Caddyfile parser and Provision both call it.
func HashFunc(name string) (crypto.Hash, error) {
	return cfparse.Keywords[crypto.Hash]{
		{Word: "sha1", Value: crypto.SHA1}, {Word: "sha256", Value: crypto.SHA256}, {Word: "sha512", Value: crypto.SHA512},
	}.Parse("algorithm", cmp.Or(name, "sha256"))
}

// ParseEncoding maps an `encoding` value to how a signature is written
// (default: hex); the Caddyfile parser and Provision both call it.
func ParseEncoding(name string) (signature.Encoding, error) {
	return cfparse.Keywords[signature.Encoding]{
		{Word: "hex", Value: signature.Hex}, {Word: "base64", Value: signature.Base64},
	}.Parse("encoding", cmp.Or(name, "hex"))
}

// ParsePadding parses `padding pkcs1 | pss`; the Caddyfile parser and
// Provision both call it. Default: pkcs1.
func ParsePadding(name string) (signature.RSAPadding, error) {
	return cfparse.Keywords[signature.RSAPadding]{
		{Word: "pkcs1", Value: signature.PKCS1v15}, {Word: "pss", Value: signature.PSS},
	}.Parse("padding", cmp.Or(name, "pkcs1"))
}

// signatureEncoding checks what the generic hmac, ed25519 and rsa schemes
// need, the header that carries the signature and no url, and returns the
// signature's encoding: def when none is given.
func signatureEncoding(cfg VerifyConfig, def signature.Encoding) (signature.Encoding, error) {
	if cfg.Header == "" {
		return 0, errors.New("a header is required (header <name> in the verify block)")
	}
	if cfg.URL != "" {
		return 0, fmt.Errorf("%s signs no url (the %s schemes do)", cfg.Scheme, strings.Join(urlSchemes(), ", "))
	}
	if cfg.Encoding == "" {
		return def, nil
	}
	return ParseEncoding(cfg.Encoding)
}

// urlSchemes lists the presets whose scheme signs the public URL.
func urlSchemes() []string {
	var names []string
	for _, p := range All() {
		if p.scheme.options&optURL != 0 {
			names = append(names, p.Name)
		}
	}
	return names
}

// rsaHash maps an `algorithm` value of the rsa scheme to its hash: the
// hmac scheme's, but SHA-1.
func rsaHash(name string) (crypto.Hash, error) {
	h, err := HashFunc(name)
	if err != nil || h == crypto.SHA1 {
		return 0, fmt.Errorf("invalid rsa algorithm '%s': want sha256 or sha512", name)
	}
	return h, nil
}

// The blocks presets are declared with.

// bodyHMAC is the scheme of providers that sign the raw body alone with
// an HMAC-SHA256 in one header.
func bodyHMAC(header, prefix string, enc signature.Encoding) scheme {
	return scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
		return signature.NewHMAC(header, prefix, crypto.SHA256, enc, cfg.Secrets)
	}}
}

// withTolerance is the scheme of a constructor that signs a timestamp.
func withTolerance(newScheme func([]string, time.Duration) signature.Verifier) scheme {
	return scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
		return newScheme(cfg.Secrets, time.Duration(cfg.Tolerance)), nil
	}}
}

// withPublicURL is the scheme of a constructor that signs the public URL.
func withPublicURL(newScheme func([]string, signature.PublicURL) signature.Verifier) scheme {
	return scheme{
		build: func(cfg VerifyConfig) (signature.Verifier, error) {
			return newScheme(cfg.Secrets, cfg.publicURL()), nil
		},
		options: optURL,
	}
}

// fixedToken is the scheme of providers that send a configured token, as
// it is, in one header.
func fixedToken(header string) scheme {
	return scheme{build: func(cfg VerifyConfig) (signature.Verifier, error) {
		return signature.NewToken(header, "", cfg.Secrets)
	}}
}

// standardWebhooks is the Standard Webhooks scheme for headers named with
// prefix; public keys join the secrets as `whpk_` keys.
func standardWebhooks(prefix string) scheme {
	return scheme{
		build: func(cfg VerifyConfig) (signature.Verifier, error) {
			public, err := whpkKeys(cfg.PublicKeys)
			if err != nil {
				return nil, err
			}
			secrets := append(slices.Clip(cfg.Secrets), public...)
			return signature.NewStandardWebhooks(prefix, secrets, time.Duration(cfg.Tolerance))
		},
		keys: StandardKeys,
	}
}
