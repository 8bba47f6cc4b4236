package providers

import (
	"crypto"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The generic building blocks (docs/providers.md: Generic schemes):
// `verify template`, a string to sign over the request with an algorithm,
// a signature's and a timestamp's place and the key material (secrets,
// public keys, or a certificate fetched from a URL the delivery names);
// and `verify jwt`, a JSON Web Token checked against secrets or a key set.
// A preset declared over them (Preset.Block) is that block's
// configuration with the route's key material.

// newTemplateVerifier builds the `template` scheme.
func newTemplateVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	tc, err := cfg.templateConfig()
	if err != nil {
		return nil, err
	}
	return signature.NewTemplate(tc)
}

// templateConfig is cfg as package signature's template takes it.
func (cfg VerifyConfig) templateConfig() (signature.TemplateConfig, error) {
	if cfg.Header != "" || cfg.Prefix != "" || cfg.Encoding != "" || cfg.Padding != "" {
		return signature.TemplateConfig{}, errors.New("a template takes signature and timestamp, not header, prefix, encoding or padding")
	}
	tc := signature.TemplateConfig{
		String:          cfg.String,
		Algorithm:       cfg.Algorithm,
		AlgorithmField:  cfg.AlgorithmField,
		AlgorithmValues: cfg.AlgorithmValues,
		Tolerance:       time.Duration(cfg.Tolerance),
		Secrets:         cfg.Secrets,
		SecretEncoding:  cfg.SecretEncoding,
		PublicKeys:      cfg.PublicKeys,
		Items:           cfg.Items,
		MaxItems:        cfg.MaxItems,
		Claims:          cfg.Claims,
	}
	if strings.Contains(cfg.String, "{url}") {
		tc.PublicURL = cfg.publicURL()
	}
	if err := fillWebhookID(&tc, cfg.WebhookID); err != nil {
		return signature.TemplateConfig{}, err
	}
	if s := cfg.Signature; s != nil {
		tc.Signature = signature.SignatureLocation{From: s.From, Prefix: s.Prefix, Encoding: s.Encoding, Format: s.Format,
			Separator: s.Separator, Skip: s.Skip, Sets: s.Sets}
	}
	if ts := cfg.Timestamp; ts != nil {
		tc.Timestamp = signature.TimestampLocation{From: ts.From, Unit: ts.Unit, Separator: ts.Separator, Prefix: ts.Prefix}
	}
	if c := cfg.CertURL; c != nil {
		tc.CertURL = signature.CertURLConfig{
			From: c.From, Hosts: c.Hosts, Paths: c.Paths, Subjects: c.Subjects, Cache: time.Duration(c.Cache),
			TrustOrigin: c.Trust == "origin", HTTPClient: keyset.Client,
		}
	}
	return tc, nil
}

// webhookIDField is the part of a template's string the route's
// webhook_id fills (PayPal's webhook id).
const webhookIDField = "{webhook_id}"

// fillWebhookID puts the route's webhook_id in the string's
// {webhook_id}, as text; a string without it takes none, one with it
// needs one.
func fillWebhookID(tc *signature.TemplateConfig, id string) error {
	has := strings.Contains(tc.String, webhookIDField)
	switch {
	case has && id == "":
		return errors.New("webhook_id: required: the string signs {webhook_id} (PayPal's webhook id, in the app's webhook settings)")
	case !has && id != "":
		return errors.New("webhook_id: the string has no {webhook_id} to fill")
	case has:
		tc.String = strings.ReplaceAll(tc.String, webhookIDField, templateText.Replace(id))
	}
	return nil
}

// templateText escapes text for a template's string.
var templateText = strings.NewReplacer(`\`, `\\`, "{", `\{`, "}", `\}`, "[", `\[`, "]", `\]`)

// templateSymmetric reports whether a template verifies with secrets (an
// HMAC, or a map of HMACs).
func (cfg VerifyConfig) templateSymmetric() bool {
	return signature.IsSymmetric(cfg.templateAlgorithm())
}

// templateAlgorithm is a template's algorithm, or one of those its field
// chooses among (all take the same kind of key).
func (cfg VerifyConfig) templateAlgorithm() string {
	for _, a := range cfg.AlgorithmValues {
		return a
	}
	return cfg.Algorithm
}

// newTemplateSigner builds the signer of a template with a secret (an
// HMAC template), for forward's resign and the send command.
func newTemplateSigner(cfg VerifyConfig, secret string) (signature.Signer, error) {
	cfg.Secrets = []string{secret}
	tc, err := cfg.templateConfig()
	if err != nil {
		return nil, err
	}
	return signature.NewTemplateSigner(tc, nil)
}

// newJWTScheme builds the `jwt` scheme: a key set (jwks_url or
// jwks_file, loaded by Provision) or secrets; with secrets alone and none
// of the token checks, Evolution API's HS256 in `Authorization: Bearer`.
func newJWTScheme(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" {
		return nil, errors.New("a jwt takes algorithms (not algorithm), no encoding and no url")
	}
	if cfg.keySet == nil && len(cfg.Issuers) == 0 && len(cfg.Audiences) == 0 && len(cfg.JWTAlgorithms) == 0 && len(cfg.Claims) == 0 && cfg.AuthScheme == "" {
		return signature.NewJWT(cfg.Header, cfg.Prefix, cfg.Secrets, time.Duration(cfg.Tolerance))
	}
	jc := signature.JWTConfig{
		Header: cfg.Header, Scheme: cfg.AuthScheme, Secrets: cfg.Secrets,
		Algorithms: cfg.JWTAlgorithms, Issuers: cfg.Issuers, Audiences: cfg.Audiences,
		Claims: cfg.Claims, Leeway: time.Duration(cfg.Tolerance),
	}
	if jc.Scheme == "" && cfg.Prefix != "" {
		jc.Scheme = strings.TrimSpace(cfg.Prefix)
	}
	if cfg.keySet != nil {
		jc.KeySet = cfg.keySet.KeySet
	}
	return signature.NewJWTVerifier(jc)
}

// blockScheme is the scheme of a preset declared as a verify block (its
// Block): the block's configuration, with what the route gives of the key
// material, tolerance, public URL and token checks.
func blockScheme(block string) (scheme, VerifyConfig) {
	decl, err := parseDeclaration(block)
	if err != nil {
		panic("providers: a preset's block does not parse: " + err.Error() + "\n" + block)
	}
	s := scheme{
		build: func(cfg VerifyConfig) (signature.Verifier, error) {
			merged := decl.with(cfg)
			if decl.Scheme == "jwt" {
				return newJWTScheme(merged)
			}
			return newTemplateVerifier(merged)
		},
		options: optURL,
	}
	switch {
	case decl.Scheme == "jwt":
		s.keys, s.options = JWTKeys, optKeySet
	case decl.templateSymmetric():
		s.keys, s.options = SecretKeys, s.options|optClaims
	default:
		s.options |= optClaims
		s.keys, s.keysOptional = PublicKeysOrCertificate, decl.CertURL != nil
	}
	if !strings.Contains(decl.String, "{url}") {
		s.options &^= optURL
	}
	if strings.Contains(decl.String, webhookIDField) {
		s.options |= optWebhookID
	}
	return s, decl
}

// parseDeclaration parses a preset's verify block, `<scheme> { … }`.
func parseDeclaration(block string) (VerifyConfig, error) {
	d := caddyfile.NewTestDispenser("verify " + block)
	d.Next()
	args := d.RemainingArgs()
	if len(args) != 1 || (args[0] != "template" && args[0] != "jwt") {
		return VerifyConfig{}, fmt.Errorf("want `template { … }` or `jwt { … }`, got %q", args)
	}
	cfg := VerifyConfig{Scheme: args[0]}
	if err := cfg.UnmarshalBlock(d, args[0]); err != nil {
		return VerifyConfig{}, err
	}
	return cfg, nil
}

// with is a preset's declared configuration with what the route gives:
// its key material, tolerance, public URL, key set and token checks.
func (decl VerifyConfig) with(route VerifyConfig) VerifyConfig {
	cfg := decl
	cfg.Secrets, cfg.PublicKeys = route.Secrets, route.PublicKeys
	if route.Tolerance != 0 {
		cfg.Tolerance = route.Tolerance
	}
	if route.URL != "" {
		cfg.URL = route.URL
	}
	cfg.WebhookID = route.WebhookID
	if route.keySet != nil {
		cfg.keySet = route.keySet
	}
	cfg.Audiences = append(decl.Audiences[:len(decl.Audiences):len(decl.Audiences)], route.Audiences...)
	if len(route.Issuers) > 0 {
		cfg.Issuers = route.Issuers
	}
	if len(route.Claims) > 0 {
		cfg.Claims = make(map[string][]string, len(decl.Claims)+len(route.Claims))
		for k, v := range decl.Claims {
			cfg.Claims[k] = v
		}
		for k, v := range route.Claims {
			cfg.Claims[k] = v
		}
	}
	return cfg
}

// loadKeySet loads the shared key set of a jwt scheme's jwks_url or
// jwks_file, its placeholders resolved.
func loadKeySet(ctx caddy.Context, cfg VerifyConfig) (*keyset.Set, error) {
	repl := caddy.NewReplacer()
	url, err := repl.ReplaceOrErr(cfg.JWKSURL, true, true)
	if err != nil {
		return nil, fmt.Errorf("resolving jwks_url: %v", err)
	}
	file, err := repl.ReplaceOrErr(cfg.JWKSFile, true, true)
	if err != nil {
		return nil, fmt.Errorf("resolving jwks_file: %v", err)
	}
	if url != "" {
		if err := cfparse.CheckHTTPURL("jwks_url", url); err != nil {
			return nil, err
		}
	}
	return keyset.Load(ctx.Logger(), url, file, cfg.JWTAlgorithms...)
}

// resignable reports whether a template can be signed again at a new time
// without changing the body: an HMAC whose signature and timestamp are in
// headers or the query, over the whole body, with secrets of one encoding,
// or of several where the header lists signatures (which key the
// application holds is not known: each signs, Polar's whsec_ secret
// decoded and as written).
func (cfg VerifyConfig) resignable() bool {
	if cfg.Scheme != "template" || !cfg.templateSymmetric() || cfg.Items != "" || cfg.Signature == nil {
		return false
	}
	if len(strings.Fields(cfg.SecretEncoding)) > 1 && (cfg.Signature.Separator == "" || cfg.Signature.Sets != "") {
		// a secret read several ways is re-signed under each, which needs
		// a header that lists signatures
		return false
	}
	if strings.HasPrefix(cfg.Signature.From, "json:") {
		return false
	}
	return cfg.Timestamp == nil || !strings.HasPrefix(cfg.Timestamp.From, "json:")
}

// credentials are the headers and query parameters a declared block reads
// its signature, timestamp and certificate URL from.
func (cfg VerifyConfig) credentials() (headers, query []string) {
	add := func(from string) {
		switch kind, name, _ := strings.Cut(from, ":"); kind {
		case "header":
			if !slices.ContainsFunc(headers, func(h string) bool { return strings.EqualFold(h, name) }) {
				headers = append(headers, name)
			}
		case "query":
			if !slices.Contains(query, name) {
				query = append(query, name)
			}
		}
	}
	if cfg.Signature != nil {
		add(cfg.Signature.From)
	}
	if cfg.Timestamp != nil {
		add(cfg.Timestamp.From)
	}
	if cfg.CertURL != nil {
		add(cfg.CertURL.From)
	}
	if cfg.Scheme == "jwt" {
		h := cfg.Header
		if h == "" {
			h = "Authorization"
		}
		headers = append(headers, h)
	}
	return headers, query
}

// declSigner is the signer of a preset declared as a block: its template
// with a secret (an HMAC) or a private key, or its JWT with a private key.
func declSigner(decl VerifyConfig) presetSigner {
	if decl.Scheme == "template" && decl.templateSymmetric() {
		return presetSigner{needs: needsSecret, build: func(cfg SignConfig) (signature.Signer, error) {
			if cfg.Secret == "" {
				return nil, errors.New("this preset signs with --secret")
			}
			return newTemplateSigner(decl, cfg.Secret)
		}}
	}
	return presetSigner{needs: "--private-key (the provider's signing key, whose public half the route verifies with)", build: func(cfg SignConfig) (signature.Signer, error) {
		if cfg.PrivateKey == "" {
			return nil, errors.New("this preset signs with the provider's private key: give --private-key")
		}
		key, err := parsePrivateKey(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("--private-key: %v", err)
		}
		if decl.Scheme == "jwt" {
			return jwtDeclSigner(decl, cfg, key)
		}
		tc, err := decl.templateConfig()
		if err != nil {
			return nil, err
		}
		return signature.NewTemplateSigner(tc, key)
	}}
}

// jwtDeclSigner signs tokens as the issuer a jwt block trusts: its first
// issuer, the first value of each claim it checks (`true` and `false` as
// booleans, as Google writes email_verified), then cfg's claims (the
// route's own checks: Pub/Sub's service account email), and as audience
// cfg's public URL, else the URL sent to (Pub/Sub's default audience is
// the push endpoint's URL), unless cfg's claims give `aud`.
func jwtDeclSigner(decl VerifyConfig, cfg SignConfig, key crypto.Signer) (signature.Signer, error) {
	claims := map[string]any{}
	if len(decl.Issuers) > 0 {
		claims["iss"] = decl.Issuers[0]
	}
	set := func(name, v string) {
		switch v {
		case "true", "false":
			claims[name] = v == "true"
		default:
			claims[name] = v
		}
	}
	for name, values := range decl.Claims {
		if len(values) > 0 {
			set(name, values[0])
		}
	}
	for name, v := range cfg.Claims {
		set(name, v)
	}
	jc := signature.JWTKeySignerConfig{Header: decl.Header, Scheme: decl.AuthScheme, Key: key, KeyID: cfg.KeyID, Claims: claims}
	if _, ok := claims["aud"]; ok || cfg.PublicURL != "" {
		if !ok {
			claims["aud"] = cfg.PublicURL
		}
		return signature.NewJWTKeySigner(jc)
	}
	if _, err := signature.NewJWTKeySigner(jc); err != nil {
		return nil, err
	}
	return signature.SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		c := jc
		c.Claims = maps.Clone(claims)
		c.Claims["aud"] = r.URL.String()
		s, err := signature.NewJWTKeySigner(c)
		if err != nil {
			return nil, err
		}
		return s.Sign(r, body, at)
	}), nil
}

// parsePrivateKey parses an ECDSA, RSA or Ed25519 private key.
func parsePrivateKey(text string) (crypto.Signer, error) {
	if k, err := signature.ParseECDSAPrivateKey(text); err == nil {
		return k, nil
	}
	if k, err := signature.ParseRSAPrivateKey(text); err == nil {
		return k, nil
	}
	if k, err := signature.ParseEd25519PrivateKey(text); err == nil {
		return k, nil
	}
	return nil, errors.New("not an ECDSA, RSA or Ed25519 private key")
}

// guarded is the build of a block preset with its own rules: what a route
// needs (checked at provision), and the deliveries it refuses before its
// block sees them.
func guarded(build func(VerifyConfig) (signature.Verifier, error), needs func(VerifyConfig) error, refuse func(*http.Request, []byte) error) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		if needs != nil {
			if err := needs(cfg); err != nil {
				return nil, err
			}
		}
		v, err := build(cfg)
		if err != nil || refuse == nil {
			return v, err
		}
		return refusing{refuse: refuse, next: v}, nil
	}
}

// refusing is a verifier that refuses some deliveries before its next.
type refusing struct {
	refuse func(*http.Request, []byte) error
	next   signature.Verifier
}

// Verify implements signature.Verifier.
func (v refusing) Verify(r *http.Request, body []byte) error {
	if err := v.refuse(r, body); err != nil {
		return err
	}
	return v.next.Verify(r, body)
}
