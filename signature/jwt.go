package signature

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// DefaultJWTPrefix is the prefix of a JSON Web Token in the Authorization
// header: the Bearer scheme (RFC 6750), whose name is matched in any case.
const DefaultJWTPrefix = "Bearer "

// NewJWT returns the scheme of a JSON Web Token (RFC 7519) signed with
// HS256 under one of secrets, sent in the named header after prefix
// (DefaultJWTPrefix when empty, matched case-insensitively; Authorization
// when header is empty). The token must carry `exp`; `exp`, `nbf` and
// `iat` are checked with the leeway (DefaultTolerance when zero), so a
// token that expired less than leeway ago is still accepted. Any other
// algorithm, `none` included, is refused before the signature is looked
// at. Secrets are used as written, whatever their length.
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
	foldPrefix := false
	if prefix == "" {
		prefix, foldPrefix = DefaultJWTPrefix, true
	}
	if len(secrets) == 0 {
		return nil, errors.New("no secret")
	}
	keys := jwt.VerificationKeySet{Keys: make([]jwt.VerificationKey, len(secrets))}
	for i, s := range secrets {
		if s == "" {
			return nil, errors.New("empty secret")
		}
		keys.Keys[i] = []byte(s)
	}
	leeway = toleranceOrDefault(leeway)
	return &jwtVerifier{
		header:     http.CanonicalHeaderKey(header),
		prefix:     prefix,
		foldPrefix: foldPrefix,
		keys:       keys,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(leeway),
			jwt.WithTimeFunc(func() time.Time { return now() }),
		),
	}, nil
}

// jwtVerifier is the scheme of NewJWT.
type jwtVerifier struct {
	header     string
	prefix     string
	foldPrefix bool
	keys       jwt.VerificationKeySet
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
	_, err := v.parser.Parse(token, v.keyFunc)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		// the signature matched: the time is wrong
		return ErrTimestamp
	}
	return ErrInvalid
}

// keyFunc gives the parser every secret (rotation).
func (v *jwtVerifier) keyFunc(*jwt.Token) (any, error) { return v.keys, nil }

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
