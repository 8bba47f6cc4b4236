package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// NewTemplateSigner signs deliveries as the template scheme of cfg
// checks them (NewTemplate), for a signature in a header or in the query:
// it sets cfg's timestamp, when it is a header or a query parameter, to
// the signing time in its unit, after its prefix; builds the string; signs
// it; and writes the signature with its prefix, encoding and format. A
// timestamp in the signature's header is written as the first item of
// that header, `<timestamp prefix><time><separator><prefix><signature>`
// (`t=…,v1=…`, Recurly's `<time>,<signature>`). JSON fields are read from
// the body, which is sent as it is. key is the private key of a
// public-key algorithm (ed25519.PrivateKey, *ecdsa.PrivateKey on P-256,
// *rsa.PrivateKey); an HMAC algorithm takes key nil and signs with the
// first key of the first of cfg.Secrets. Items mode and signatures in the
// body are not signed; cfg's public keys and certificate URL are not used.
func NewTemplateSigner(cfg TemplateConfig, key crypto.Signer) (Signer, error) {
	v, err := newTemplate(cfg, false)
	if err != nil {
		return nil, err
	}
	if v.items != nil || v.sig.kind == fromJSON {
		return nil, errors.New("signature: the signer writes signatures in a header or the query, not in the body")
	}
	if v.skip > 1 || (v.skip == 1 && !v.sharesHeader()) {
		return nil, errors.New("signature: the signer writes no items before the signature but the timestamp of the same header")
	}
	s := &templateSigner{v: v, key: key}
	if v.family == familyHMAC {
		if key != nil {
			return nil, errors.New("an HMAC algorithm signs with a secret, not a private key")
		}
		_, first, err := decodeSecrets(cfg.Secrets, cfg.SecretEncoding)
		if err != nil {
			return nil, err
		}
		// the first secret under the first encoding that decodes it
		s.secret = first[0]
	} else if key == nil || checkPublicKey(v.family, key.Public()) != nil {
		return nil, fmt.Errorf("%s signs with a %s private key", v.family, v.family)
	}
	return s, nil
}

// templateSigner is the signer of NewTemplateSigner.
type templateSigner struct {
	v      *templateVerifier
	key    crypto.Signer
	secret []byte
}

// Sign implements Signer.
func (s *templateSigner) Sign(r *http.Request, body []byte, at time.Time) ([]byte, error) {
	v := s.v
	st := v.states.Get().(*templateState)
	defer v.release(st)
	shared := v.sharesHeader()
	if v.ts.kind != 0 {
		switch v.unit {
		case unitMillis:
			st.ts = strconv.FormatInt(at.UnixMilli(), 10)
		case unitRFC3339:
			st.ts = at.UTC().Format(time.RFC3339)
		default:
			st.ts = unix(at)
		}
		if !shared {
			if err := setSource(r, v.ts, v.tsPrefix+st.ts); err != nil {
				return nil, fmt.Errorf("timestamp: %v", err)
			}
		}
	}
	if v.paths.leaves > 0 {
		if err := v.paths.readJSON(body, st.spans); err != nil {
			return nil, fmt.Errorf("the body's JSON: %v", err)
		}
	}
	a := v.alg
	if a == nil {
		val, _, err := v.value(st, v.algField, r, body)
		if err != nil || v.algValues[val] == nil {
			return nil, fmt.Errorf("algorithm: the delivery's %q chooses no algorithm", val)
		}
		a = v.algValues[val]
	}
	if err := v.build(st, r, body, a.family == familyEd25519); err != nil {
		return nil, fmt.Errorf("string: %v", err)
	}
	var sig []byte
	var err error
	switch a.family {
	case familyHMAC:
		m := hmac.New(newHash(a.hash), s.secret)
		st.writeTo(m, body)
		sig = m.Sum(nil)
	case familyEd25519:
		sig = ed25519.Sign(s.key.(ed25519.PrivateKey), st.msg)
	default:
		h := newHash(a.hash)()
		st.writeTo(h, body)
		sig, err = signDigest(a, s.key, h, v.rawECDSA)
	}
	if err != nil {
		return nil, err
	}
	value := v.prefix + encode(v.encoding, sig)
	if shared {
		// the timestamp's item first: `t=…,v1=…`, Recurly's `<t>,<sig>`
		value = v.tsPrefix + st.ts + v.separator + value
	}
	if err := setSource(r, v.sig, value); err != nil {
		return nil, fmt.Errorf("signature: %v", err)
	}
	return body, nil
}

// sharesHeader reports whether the timestamp is an item of the
// signature's header.
func (v *templateVerifier) sharesHeader() bool {
	return v.ts.kind == fromHeader && v.sig.kind == fromHeader && v.ts.name == v.sig.name
}

// signDigest signs the digest in h with an ECDSA or RSA key.
func signDigest(a *algorithm, key crypto.Signer, h hash.Hash, rawECDSA bool) ([]byte, error) {
	digest := h.Sum(nil)
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := ecdsa.SignASN1(rand.Reader, k, digest)
		if err != nil || !rawECDSA {
			return der, err
		}
		return derToRaw(der)
	case *rsa.PrivateKey:
		if a.pss {
			return rsa.SignPSS(rand.Reader, k, a.hash, digest, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		}
		return rsa.SignPKCS1v15(rand.Reader, k, a.hash, digest)
	}
	return nil, fmt.Errorf("a %T cannot sign %s", key, a.name)
}

// setSource writes val where src reads it: a header or a query parameter.
func setSource(r *http.Request, src source, val string) error {
	switch src.kind {
	case fromHeader:
		r.Header.Set(src.name, val)
	case fromQuery:
		q := r.URL.Query()
		q.Set(src.name, val)
		r.URL.RawQuery = q.Encode()
	default:
		return errors.New("the signer sets headers and query parameters, not the body")
	}
	return nil
}

// JWTKeySignerConfig configures NewJWTKeySigner.
type JWTKeySignerConfig struct {
	// Header is where the token is sent. Default: Authorization.
	Header string

	// Scheme is written before the token and a space. Default: Bearer in
	// Authorization, none in any other header.
	Scheme string

	// Key signs the tokens: an *rsa.PrivateKey, an *ecdsa.PrivateKey on
	// P-256 or an ed25519.PrivateKey. Required.
	Key crypto.Signer

	// Algorithm is the token's `alg`. Default: RS256 for an RSA key,
	// ES256 for an ECDSA key, EdDSA for an Ed25519 key.
	Algorithm string

	// KeyID is the token's `kid`, the key's id in the issuer's key set.
	KeyID string

	// Claims are the token's claims beside `iat` (the signing time) and
	// `exp` (Lifetime later), which they may replace.
	Claims map[string]any

	// Lifetime is how long a token is valid. Default: JWTLifetime.
	Lifetime time.Duration
}

// NewJWTKeySigner sends JSON Web Tokens signed with a private key, as an
// issuer with a published key set does (Google's tokens for Pub/Sub
// push), for NewJWTVerifier with a KeySet holding the key's public half.
func NewJWTKeySigner(cfg JWTKeySignerConfig) (Signer, error) {
	if cfg.Key == nil {
		return nil, errors.New("no private key")
	}
	alg := cfg.Algorithm
	if alg == "" {
		switch k := cfg.Key.(type) {
		case *rsa.PrivateKey:
			alg = "RS256"
		case *ecdsa.PrivateKey:
			alg = "ES256"
			if k.Curve.Params().BitSize != 256 {
				return nil, errors.New("an ECDSA key on P-256 signs ES256; give the algorithm of another curve")
			}
		case ed25519.PrivateKey:
			alg = "EdDSA"
		default:
			return nil, fmt.Errorf("a %T does not sign JSON Web Tokens", cfg.Key)
		}
	}
	method := jwt.GetSigningMethod(alg)
	if method == nil || jwsAlgorithms[alg] == familyHMAC || !keyFitsJWS(alg, cfg.Key.Public()) {
		return nil, fmt.Errorf("algorithm %q does not sign with a %T", alg, cfg.Key)
	}
	header, prefix := cfg.Header, ""
	if header == "" {
		header = "Authorization"
	}
	switch {
	case cfg.Scheme != "":
		prefix = cfg.Scheme + " "
	case http.CanonicalHeaderKey(header) == "Authorization":
		prefix = DefaultJWTPrefix
	}
	lifetime := orDefault(cfg.Lifetime, JWTLifetime)
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		claims := jwt.MapClaims{"iat": at.Unix(), "exp": at.Add(lifetime).Unix()}
		for k, v := range cfg.Claims {
			claims[k] = v
		}
		t := jwt.NewWithClaims(method, claims)
		if cfg.KeyID != "" {
			t.Header["kid"] = cfg.KeyID
		}
		token, err := t.SignedString(cfg.Key)
		if err != nil {
			return nil, err
		}
		r.Header.Set(header, prefix+token)
		return body, nil
	}), nil
}

var _ Signer = (*templateSigner)(nil)
