package signature

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultJWTPrefix is the prefix of a JSON Web Token in the Authorization
// header: the Bearer scheme (RFC 6750), whose name is matched in any case.
const DefaultJWTPrefix = "Bearer "

// JWTConfig configures NewJWTVerifier: a JSON Web Token (RFC 7519) sent in
// a header, signed with a shared secret or with a key of a JWK set, whose
// issuer, audience and claims are checked. NewJWTVerifier's errors start
// with the option's name in the module's Caddyfile (`header`, `scheme`,
// `secret`, `jwks`, `algorithms`, `issuer`, `audience`, `claim`,
// `leeway`).
type JWTConfig struct {
	// Header is the header holding the token. Default: Authorization.
	Header string

	// Scheme is the authentication scheme written before the token and a
	// space, matched in any case. Default: Bearer in Authorization, none
	// in any other header.
	Scheme string

	// Secrets are HMAC keys, used as written (several for rotation), for
	// HS256, HS384 and HS512. Exactly one of Secrets and KeySet is
	// required.
	Secrets []string

	// KeySet gives the public keys, chosen by the token's `kid` (Google's
	// certificates for Pub/Sub); built by NewKeySet from `jwks_url` or
	// `jwks_file`.
	KeySet *KeySet

	// Algorithms are the `alg` values accepted. `none` is never accepted,
	// nor an HMAC algorithm with a key set, nor a public-key algorithm
	// with secrets. Default: HS256 with secrets, RS256 with a key set.
	Algorithms []string

	// Issuers, when set, are the accepted `iss` values (Google signs
	// Pub/Sub's tokens as accounts.google.com and
	// https://accounts.google.com); a token without `iss` is refused.
	Issuers []string

	// Audiences are the accepted `aud` values; the token's `aud` (a
	// string or a list) must hold one. Required with a key set: anyone can
	// have a token signed by Google for an audience of their own.
	Audiences []string

	// Claims are claims the token must carry, each with one of the values
	// listed (compared as text: `true`, `42`; a list claim holds one of
	// them). Pub/Sub: "email" the push subscription's service account and
	// "email_verified" "true".
	Claims map[string][]string

	// Leeway is the clock skew allowed on `exp`, `nbf` and `iat`, which
	// are checked; `exp` is required. Default: DefaultTolerance.
	Leeway time.Duration
}

// NewJWTVerifier returns the scheme of a JSON Web Token as cfg describes
// it. The algorithm (the token's `alg`) is checked before any key is
// used. A token signs no body: it proves the sender held the key within
// the token's lifetime, not that the body is the one it sent. Google's
// tokens for Pub/Sub push are checked so (Google Cloud, "Authenticate push
// subscriptions"): RS256 against https://www.googleapis.com/oauth2/v3/certs,
// the audience, the issuer, `email` and `email_verified`.
func NewJWTVerifier(cfg JWTConfig) (Verifier, error) {
	header := cfg.Header
	if header == "" {
		header = "Authorization"
	}
	prefix := ""
	switch {
	case cfg.Scheme != "":
		if strings.ContainsAny(cfg.Scheme, " \t") {
			return nil, fmt.Errorf("scheme: %q is not a scheme name", cfg.Scheme)
		}
		prefix = cfg.Scheme + " "
	case http.CanonicalHeaderKey(header) == "Authorization":
		prefix = DefaultJWTPrefix
	}
	return newJWTVerifier(cfg, header, prefix, true)
}

// NewJWT returns the scheme of a JSON Web Token (RFC 7519) signed with
// HS256 under one of secrets, sent in the named header after prefix
// (DefaultJWTPrefix when empty, matched case-insensitively; Authorization
// when header is empty). The token must carry `exp`; `exp`, `nbf` and
// `iat` are checked with the leeway (DefaultTolerance when zero), so a
// token that expired less than leeway ago is still accepted. Any other
// algorithm, `none` included, is refused before the signature is looked
// at. Secrets are used as written, whatever their length. It is
// NewJWTVerifier with HS256 and secrets.
//
// Evolution API sends such a token when an instance's webhook headers
// hold a `jwt_key`: `Authorization: Bearer <JWT>`, HS256, claims
// `{iat, exp: iat+600, app: "evolution", action: "webhook"}`, one token
// per event, reused by that event's retries (EvolutionAPI/evolution-api,
// WebhookController.generateJwtToken). The token signs no body: it proves
// the sender knew the secret within the token's lifetime, not that the
// body is the one it sent.
func NewJWT(header, prefix string, secrets []string, leeway time.Duration) (Verifier, error) {
	if header == "" {
		header = "Authorization"
	}
	fold := false
	if prefix == "" {
		prefix, fold = DefaultJWTPrefix, true
	}
	if len(secrets) == 0 {
		return nil, errors.New("no secret")
	}
	return newJWTVerifier(JWTConfig{Secrets: secrets, Algorithms: []string{"HS256"}, Leeway: leeway}, header, prefix, fold)
}

// newJWTVerifier builds the verifier once the header's prefix is known.
func newJWTVerifier(cfg JWTConfig, header, prefix string, fold bool) (*jwtVerifier, error) {
	v := &jwtVerifier{
		header: http.CanonicalHeaderKey(header), prefix: prefix, foldPrefix: fold,
		keySet: cfg.KeySet, issuers: cfg.Issuers, claims: cfg.Claims,
	}
	switch {
	case len(cfg.Secrets) > 0 && cfg.KeySet != nil:
		return nil, errors.New("secret: give secrets or a key set (jwks_url, jwks_file), not both")
	case len(cfg.Secrets) == 0 && cfg.KeySet == nil:
		return nil, errors.New("secret: give secrets or a key set (jwks_url, jwks_file)")
	}
	v.secrets.Keys = make([]jwt.VerificationKey, len(cfg.Secrets))
	for i, s := range cfg.Secrets {
		if s == "" {
			return nil, fmt.Errorf("secret %d: empty", i+1)
		}
		v.secrets.Keys[i] = []byte(s)
	}
	algs := cfg.Algorithms
	if len(algs) == 0 {
		algs = []string{"HS256"}
		if cfg.KeySet != nil {
			algs = []string{"RS256"}
		}
	}
	for _, a := range algs {
		f, ok := jwsAlgorithms[a]
		switch {
		case strings.EqualFold(a, "none"):
			return nil, errors.New("algorithms: none is never accepted")
		case !ok:
			return nil, fmt.Errorf("algorithms: unknown %q", a)
		case f == familyHMAC && cfg.KeySet != nil:
			return nil, fmt.Errorf("algorithms: %s is an HMAC algorithm: never with a key set's public keys", a)
		case f != familyHMAC && cfg.KeySet == nil:
			return nil, fmt.Errorf("algorithms: %s needs a key set (jwks_url, jwks_file), not secrets", a)
		}
	}
	if cfg.KeySet != nil && len(cfg.Audiences) == 0 {
		return nil, errors.New("audience: required with a key set: the issuer signs tokens for audiences other than this endpoint")
	}
	for _, a := range cfg.Audiences {
		if a == "" {
			return nil, errors.New("audience: empty")
		}
	}
	for _, iss := range cfg.Issuers {
		if iss == "" {
			return nil, errors.New("issuer: empty")
		}
	}
	for name, values := range cfg.Claims {
		if name == "" || len(values) == 0 {
			return nil, fmt.Errorf("claim %q: a name and at least one value", name)
		}
	}
	if cfg.Leeway < 0 {
		return nil, errors.New("leeway: must not be negative")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(algs),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(toleranceOrDefault(cfg.Leeway)),
		jwt.WithTimeFunc(func() time.Time { return now() }),
	}
	if len(cfg.Audiences) > 0 {
		opts = append(opts, jwt.WithAudience(cfg.Audiences...))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// jwtVerifier is the scheme of NewJWTVerifier and NewJWT.
type jwtVerifier struct {
	header     string
	prefix     string
	foldPrefix bool
	secrets    jwt.VerificationKeySet
	keySet     *KeySet
	issuers    []string
	claims     map[string][]string
	parser     *jwt.Parser
}

// maxJWT bounds the token that is parsed.
const maxJWT = 8 << 10

// Verify implements Verifier.
func (v *jwtVerifier) Verify(r *http.Request, _ []byte) error {
	val := strings.TrimSpace(headerValue(r.Header, v.header))
	if val == "" {
		return ErrMissing
	}
	token, ok := cutPrefix(val, v.prefix, v.foldPrefix)
	if !ok || token == "" || len(token) > maxJWT {
		return ErrInvalid
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, v.keyFunc)
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		return ErrUnavailable
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		// the signature matched: the time is wrong
		return ErrTimestamp
	default:
		return ErrInvalid
	}
	if len(v.issuers) > 0 {
		iss, _ := claims["iss"].(string)
		if !slices.Contains(v.issuers, iss) {
			return ErrInvalid
		}
	}
	for name, want := range v.claims {
		if !claimMatches(claims[name], want) {
			return ErrInvalid
		}
	}
	return nil
}

// keyFunc gives the parser every secret (rotation), or the key set's keys
// for the token's kid and alg.
func (v *jwtVerifier) keyFunc(t *jwt.Token) (any, error) {
	if v.keySet == nil {
		return v.secrets, nil
	}
	kid, _ := t.Header["kid"].(string)
	keys, err := v.keySet.candidates(kid, t.Method.Alg())
	if err != nil {
		return nil, err
	}
	set := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, len(keys))}
	for i, k := range keys {
		set.Keys[i] = k
	}
	return set, nil
}

// claimMatches reports whether a claim's value, as text, is one of want;
// a list matches when one of its elements does.
func claimMatches(v any, want []string) bool {
	switch x := v.(type) {
	case string:
		return slices.Contains(want, x)
	case bool:
		return slices.Contains(want, strconv.FormatBool(x))
	case float64:
		return slices.Contains(want, strconv.FormatFloat(x, 'f', -1, 64))
	case []any:
		for _, e := range x {
			if _, isList := e.([]any); !isList && claimMatches(e, want) {
				return true
			}
		}
	}
	return false
}

// cutPrefix removes prefix from v, in any case when fold is set.
func cutPrefix(v, prefix string, fold bool) (string, bool) {
	if !fold {
		return strings.CutPrefix(v, prefix)
	}
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", false
	}
	return v[len(prefix):], true
}

var _ Verifier = (*jwtVerifier)(nil)
