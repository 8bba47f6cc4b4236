package signature

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// NewTemplateSigner signs deliveries as the template scheme of cfg
// checks them (NewTemplate): it sets cfg's timestamp to the signing time
// in its unit, after its prefix; builds the string; signs it; and writes
// the signature with its prefix, encoding and format. A timestamp or a
// signature in a header or the query is set there, and the body is sent
// as it is; a timestamp in the signature's header is written as the
// first item of that header, `<timestamp prefix><time><separator><prefix>
// <signature>` (`t=…,v1=…`, Recurly's `<time>,<signature>`). One in the
// body (`json:`), and each item's in Items mode, is written into the body,
// which is then sent as Go's encoder writes it (members in name order);
// the string of such a template must not sign the body itself. key is the
// private key of a public-key algorithm (ed25519.PrivateKey,
// *ecdsa.PrivateKey on P-256, *rsa.PrivateKey); an HMAC algorithm takes
// key nil and signs with the first key of the first of cfg.Secrets, and
// Token sends that secret. cfg's public keys and certificate URL are not
// used.
func NewTemplateSigner(cfg TemplateConfig, key crypto.Signer) (Signer, error) {
	v, err := newTemplate(cfg, false)
	if err != nil {
		return nil, err
	}
	if v.skip > 1 || (v.skip == 1 && !v.sharesHeader()) {
		return nil, errors.New("signature: the signer writes no items before the signature but the timestamp of the same header")
	}
	if (v.items != nil || v.sig.kind == fromJSON) && v.tmpl.signsBody() {
		return nil, errors.New("string: the signature is written into the body, which the string signs")
	}
	s := &templateSigner{v: v, key: key}
	switch v.family {
	case familyHMAC, familyToken:
		if key != nil {
			return nil, fmt.Errorf("%s signs with a secret, not a private key", v.family)
		}
		if v.family == familyToken {
			if len(cfg.Secrets) == 0 || cfg.Secrets[0] == "" {
				return nil, errors.New("secret: a token is sent as one of the secrets: give one")
			}
			s.secret = []byte(cfg.Secrets[0])
			break
		}
		_, first, err := decodeSecrets(cfg.Secrets, cfg.SecretEncoding)
		if err != nil {
			return nil, err
		}
		// the first secret under the first encoding that decodes it; under
		// the others too where the header lists several signatures (Polar's
		// whsec_ secret, decoded or as written), so a receiver holding
		// either key finds its own
		s.secret = first[0]
		if v.listsSignatures() {
			s.others = first[1:]
		}
	default:
		if key == nil || checkPublicKey(v.family, key.Public()) != nil {
			return nil, fmt.Errorf("%s signs with a %s private key", v.family, v.family)
		}
	}
	return s, nil
}

// templateSigner is the signer of NewTemplateSigner.
type templateSigner struct {
	v      *templateVerifier
	key    crypto.Signer
	secret []byte
	// others are the first secret's keys under its other encodings, each
	// signing too when the header lists several signatures.
	others [][]byte
}

// Sign implements Signer.
func (s *templateSigner) Sign(r *http.Request, body []byte, at time.Time) ([]byte, error) {
	v := s.v
	ts := ""
	if v.ts.kind != 0 {
		switch v.unit {
		case unitMillis:
			ts = strconv.FormatInt(at.UnixMilli(), 10)
		case unitRFC3339:
			ts = at.UTC().Format(time.RFC3339)
		default:
			ts = unix(at)
		}
		if v.ts.kind != fromJSON && !v.sharesHeader() {
			if err := setSource(r, v.ts, v.tsPrefix+ts); err != nil {
				return nil, fmt.Errorf("timestamp: %v", err)
			}
		}
	}
	if v.sig.kind == fromJSON {
		return s.signInBody(r, body, ts)
	}
	if v.ts.kind == fromJSON {
		// the timestamp alone is in the body: sign the body it is in
		doc, _, err := s.stamped(body, ts)
		if err != nil {
			return nil, err
		}
		if body, err = encodeJSONDocument(doc); err != nil {
			return nil, err
		}
	}
	sig, err := s.sign(r, body, ts, s.secret)
	if err != nil {
		return nil, err
	}
	for _, key := range s.others {
		other, err := s.sign(r, body, ts, key)
		if err != nil {
			return nil, err
		}
		sig += v.separator + other
	}
	if err := s.setSignature(r, sig, ts); err != nil {
		return nil, err
	}
	return body, nil
}

// setSignature writes a signature where it goes out of the body, after
// the timestamp's item when they share a header.
func (s *templateSigner) setSignature(r *http.Request, sig, ts string) error {
	v := s.v
	if v.sharesHeader() {
		// the timestamp's item first: `t=…,v1=…`, Recurly's `<t>,<sig>`
		sig = v.tsPrefix + ts + v.separator + sig
	}
	if err := setSource(r, v.sig, sig); err != nil {
		return fmt.Errorf("signature: %v", err)
	}
	return nil
}

// stamped decodes a body and returns its signed documents (the body, or
// its items in Items mode), the timestamp written into each when it is in
// the body.
func (s *templateSigner) stamped(body []byte, ts string) (doc any, targets []any, err error) {
	v := s.v
	if doc, err = decodeJSONDocument(body); err != nil {
		return nil, nil, fmt.Errorf("the body: %v", err)
	}
	targets = []any{doc}
	if v.items != nil {
		if targets, err = itemsOf(doc, v.items); err != nil {
			return nil, nil, err
		}
	}
	if v.ts.kind == fromJSON {
		for _, t := range targets {
			if err := setJSONPath(t, v.ts.path, v.tsPrefix+ts); err != nil {
				return nil, nil, fmt.Errorf("timestamp: %v", err)
			}
		}
	}
	return doc, targets, nil
}

// signInBody signs a delivery whose signatures are in the body: each is
// written into the decoded body (into each item in Items mode), which is
// encoded again.
func (s *templateSigner) signInBody(r *http.Request, body []byte, ts string) ([]byte, error) {
	v := s.v
	doc, targets, err := s.stamped(body, ts)
	if err != nil {
		return nil, err
	}
	for _, t := range targets {
		// the string reads the item (or the body) as it is sent, without
		// its signature
		signed, err := encodeJSONDocument(t)
		if err != nil {
			return nil, err
		}
		sig, err := s.sign(r, signed, ts, s.secret)
		if err != nil {
			return nil, err
		}
		if err := setJSONPath(t, v.sig.path, sig); err != nil {
			return nil, fmt.Errorf("signature: %v", err)
		}
	}
	return encodeJSONDocument(doc)
}

// sign returns the signature of the string the template makes of the
// request, the JSON document doc (the body, or an item) and the
// timestamp ts, with its prefix and in its encoding; an HMAC is keyed
// with secret.
func (s *templateSigner) sign(r *http.Request, doc []byte, ts string, secret []byte) (string, error) {
	v := s.v
	st := v.states.Get().(*templateState)
	defer v.release(st)
	st.ts = ts
	if v.paths.leaves > 0 {
		if err := v.paths.readJSON(doc, st.spans); err != nil {
			return "", fmt.Errorf("the body's JSON: %v", err)
		}
	}
	a := v.alg
	if a == nil {
		val, _, err := v.value(st, v.algField, r, doc)
		if err != nil || v.algValues[val] == nil {
			return "", fmt.Errorf("algorithm: the delivery's %q chooses no algorithm", val)
		}
		a = v.algValues[val]
	}
	if a.family == familyToken {
		return v.prefix + string(s.secret), nil
	}
	if err := v.build(st, r, doc, a.family == familyEd25519); err != nil {
		return "", fmt.Errorf("string: %v", err)
	}
	var sig []byte
	var err error
	switch a.family {
	case familyHMAC:
		m := hmac.New(newHash(a.hash), secret)
		st.writeTo(m, doc)
		sig = m.Sum(nil)
	case familyEd25519:
		sig = ed25519.Sign(s.key.(ed25519.PrivateKey), st.msg)
	default:
		h := newHash(a.hash)()
		st.writeTo(h, doc)
		sig, err = signDigest(a, s.key, h, v.rawECDSA)
	}
	if err != nil {
		return "", err
	}
	return v.prefix + encode(v.encoding, sig), nil
}

// signsBody reports whether the string signs the body itself ({body},
// {body.crc32}, {body.sha256}).
func (t *stringTemplate) signsBody() bool {
	for _, p := range t.parts {
		switch p.kind {
		case partBody, partCRC32, partSHA256:
			return true
		}
	}
	return false
}

// decodeJSONDocument decodes a body for the signers that write into it,
// numbers kept as written.
func decodeJSONDocument(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON document")
	}
	return doc, nil
}

// encodeJSONDocument encodes a decoded body, HTML characters as they are.
func encodeJSONDocument(doc any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// itemsOf returns the items of a decoded body in Items mode.
func itemsOf(doc any, ip *itemPaths) ([]any, error) {
	arr := doc
	if ip.arrayPath != nil {
		arr = getJSONPath(doc, ip.arrayPath)
	}
	elems, ok := arr.([]any)
	if !ok || len(elems) == 0 {
		return nil, errors.New("items: the body has no items to sign")
	}
	items := make([]any, len(elems))
	for i, e := range elems {
		if ip.innerPath != nil {
			e = getJSONPath(e, ip.innerPath)
		}
		if _, ok := e.(map[string]any); !ok {
			return nil, fmt.Errorf("items: item %d is not an object", i+1)
		}
		items[i] = e
	}
	return items, nil
}

// getJSONPath returns the value at path in a decoded document, nil when
// there is none.
func getJSONPath(v any, path []string) any {
	for _, name := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[name]
		case []any:
			i, ok := arrayIndex(name)
			if !ok || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// setJSONPath sets the string at path in a decoded document, making the
// objects on the way that are missing.
func setJSONPath(doc any, path []string, val string) error {
	v := doc
	for i, name := range path {
		last := i == len(path)-1
		switch x := v.(type) {
		case map[string]any:
			if last {
				x[name] = val
				return nil
			}
			next := x[name]
			if next == nil {
				next = map[string]any{}
				x[name] = next
			}
			v = next
		case []any:
			n, ok := arrayIndex(name)
			if !ok || n >= len(x) {
				return fmt.Errorf("%s: no element %s", strings.Join(path[:i], "."), name)
			}
			if last {
				x[n] = val
				return nil
			}
			v = x[n]
		default:
			return fmt.Errorf("%s is not an object", strings.Join(path[:i], "."))
		}
	}
	return errors.New("empty path")
}

// sharesHeader reports whether the timestamp is an item of the
// signature's header.
func (v *templateVerifier) sharesHeader() bool {
	return v.ts.kind == fromHeader && v.sig.kind == fromHeader && v.ts.name == v.sig.name
}

// listsSignatures reports whether the signer can write several signatures
// into the signature's value, one set of them, outside the body.
func (v *templateVerifier) listsSignatures() bool {
	return v.separator != "" && v.sets == "" && v.sig.kind != fromJSON && v.items == nil
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
