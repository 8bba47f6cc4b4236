package signature

import (
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TemplateConfig configures NewTemplate, the generic scheme for providers
// without a scheme of their own: a string to sign written as a template
// over the request, an algorithm, where the signature (and a timestamp)
// are, and the key material. Each field is checked by NewTemplate, whose
// errors start with the option's name in the module's Caddyfile (`string`,
// `algorithm`, `signature`, `timestamp`, `tolerance`, `secret`,
// `secret_encoding`, `public_key`, `cert_url`, `items`).
type TemplateConfig struct {
	// String is the template of the signed message: text, fields in
	// braces and optional parts in brackets, as the package documentation
	// describes (Templates). Required.
	String string

	// Algorithm is one of HMACSHA1, HMACSHA256, HMACSHA512, Ed25519,
	// ECDSAP256SHA256, RSASHA1, RSASHA256 and RSAPSSSHA256. Required
	// unless AlgorithmField is set.
	Algorithm string

	// AlgorithmField, instead of Algorithm, chooses each delivery's
	// algorithm by the value of a field (`header:<Name>`, `json:<path>`
	// or `query:<name>`), through AlgorithmValues; a value not in the map
	// is ErrInvalid, an absent one ErrMissing. Every algorithm of the map
	// must take the same kind of key. Amazon SNS: `json:SignatureVersion`
	// with {"1": "rsa-sha1", "2": "rsa-sha256"}.
	AlgorithmField  string
	AlgorithmValues map[string]string

	// Signature is where the signature is and how it is written.
	Signature SignatureLocation

	// Timestamp, when its From is set, is a signed time that must be
	// within Tolerance of the current time.
	Timestamp TimestampLocation

	// Tolerance is how far the timestamp may be from the current time,
	// in the past or the future. Default: DefaultTolerance.
	Tolerance time.Duration

	// Secrets are the HMAC keys (several for rotation), decoded as
	// SecretEncoding says. The HMAC algorithms need them; the others
	// refuse them.
	Secrets []string

	// SecretEncoding is how the secrets are written: "" or "raw" (used as
	// written), "hex" (Adyen's HMAC keys) or "base64". Default: raw.
	SecretEncoding string

	// PublicKeys are the keys of a public-key algorithm (several for
	// rotation), written as the Parse*PublicKey functions read them (PEM,
	// base64 or hex). Exactly one of PublicKeys and CertURL is needed by
	// the public-key algorithms.
	PublicKeys []string

	// CertURL, when its From is set, takes each delivery's key from the
	// certificate at the URL the delivery names, fetched only from the
	// hosts it allows.
	CertURL CertURLConfig

	// Items, when set, is `json:<path>` to an array of items signed one
	// by one, `#` standing for the array and what follows for the path
	// to the item within each element: Adyen's
	// `json:notificationItems.#.NotificationRequestItem`. Every item must
	// verify; then every `json:` path of the configuration (fields of the
	// string, the signature, the timestamp, the certificate URL, the
	// algorithm field) is read within the item. No item is ErrMissing.
	Items string

	// MaxItems bounds the items of a delivery in Items mode; more is
	// ErrInvalid. Default: 1000.
	MaxItems int

	// PublicURL gives the `{url}` of the string: the URL the provider
	// was told to deliver to. Required when the string uses `{url}`.
	PublicURL PublicURL
}

// SignatureLocation is where a template's signature is, and how it is
// written.
type SignatureLocation struct {
	// From is `header:<Name>`, `json:<path>` or `query:<name>`. A repeated
	// header gives a candidate per value. Required.
	From string

	// Prefix is written before the signature (`sha256=`, `v1,`); a value
	// without it is no candidate.
	Prefix string

	// Encoding is "hex" or "base64" (standard, padded). Default: hex for
	// the HMAC algorithms, base64 for the others.
	Encoding string

	// Format is how an ECDSA signature is written: "der" (ASN.1, as
	// SendGrid sends it) or "raw" (r||s, 64 bytes, as JOSE and WebCrypto
	// write it). Default: der. Only ECDSA takes it.
	Format string

	// Separator, when set, splits a value into several signatures (a
	// provider rotating keys sends one per key: Standard Webhooks'
	// `v1,<a> v1,<b>` is Separator " " and Prefix "v1,"). Any of them
	// may match; at most 16 are looked at for an HMAC, 4 for the others.
	Separator string
}

// TimestampLocation is where a template's signed time is.
type TimestampLocation struct {
	// From is `header:<Name>`, `json:<path>` or `query:<name>`; empty for
	// no timestamp.
	From string

	// Unit is "s" (Unix seconds), "ms" (Unix milliseconds) or "rfc3339".
	// Default: s.
	Unit string
}

// Defaults of NewTemplate.
const (
	// DefaultMaxItems bounds the items of a delivery in Items mode.
	DefaultMaxItems = 1000
)

// timeUnit is how a timestamp is written.
type timeUnit uint8

const (
	unitSeconds timeUnit = iota
	unitMillis
	unitRFC3339
)

// NewTemplate returns the generic template scheme of cfg: the signature
// at cfg.Signature must be, under one of the keys, the signature by the
// algorithm of the string cfg.String makes of the request. Amazon SNS,
// PayPal, SendGrid and Adyen are written so in the package's tests,
// checked against their published vectors. Every error names the option
// it is about. An HMAC template allocates nothing per request, JSON fields
// and items included; decoded query values and the public-key algorithms'
// arithmetic allocate a little.
func NewTemplate(cfg TemplateConfig) (Verifier, error) {
	return newTemplate(cfg, true)
}

// newTemplate builds the scheme of cfg; without keys (for a signer) the
// key material is not looked at.
func newTemplate(cfg TemplateConfig, keys bool) (*templateVerifier, error) {
	v := &templateVerifier{paths: newJSONPaths(), publicURL: cfg.PublicURL, maxItems: cfg.MaxItems}
	if strings.TrimSpace(cfg.String) == "" {
		return nil, errors.New("string: required")
	}
	t, err := parseTemplate(cfg.String, v.paths)
	if err != nil {
		return nil, fmt.Errorf("string: %v", err)
	}
	v.tmpl = t
	if t.url && cfg.PublicURL == nil {
		return nil, errors.New("string: {url} needs the public URL the provider delivers to")
	}
	if err := v.setAlgorithms(cfg); err != nil {
		return nil, err
	}
	if err := v.setSignature(cfg.Signature); err != nil {
		return nil, err
	}
	if err := v.setTimestamp(cfg); err != nil {
		return nil, err
	}
	if keys {
		if err := v.setKeys(cfg); err != nil {
			return nil, err
		}
	}
	if err := v.setItems(cfg.Items); err != nil {
		return nil, err
	}
	if v.maxItems < 0 {
		return nil, errors.New("max_items: must not be negative")
	}
	if v.maxItems == 0 {
		v.maxItems = DefaultMaxItems
	}
	leaves, groups := v.paths.leaves, len(t.groups)
	v.states.New = func() any {
		return &templateState{spans: make([]jsonSpan, leaves), include: make([]bool, groups), msg: make([]byte, 0, 512)}
	}
	return v, nil
}

// templateVerifier is the scheme of NewTemplate.
type templateVerifier struct {
	tmpl      *stringTemplate
	paths     *jsonPaths
	publicURL PublicURL

	alg       *algorithm            // or, by a field:
	algField  source                // (kind 0: none)
	algValues map[string]*algorithm // values of algField
	family    keyFamily

	sig       source
	prefix    string
	separator string
	encoding  Encoding
	rawECDSA  bool

	ts        source // (kind 0: none)
	unit      timeUnit
	tolerance time.Duration

	keyrings map[*algorithm]keyring // HMAC
	keys     []crypto.PublicKey     // public keys, or
	certURL  source
	certs    *certFetcher

	items    *itemPaths
	maxItems int

	states sync.Pool // of *templateState
}

// itemPaths is where the items of Items mode are: the array, and the
// item within each element.
type itemPaths struct {
	array *jsonPaths // one path, to the array
	inner *jsonPaths // one path within an element; nil when the element is the item
}

func (v *templateVerifier) setAlgorithms(cfg TemplateConfig) error {
	switch {
	case cfg.Algorithm != "" && cfg.AlgorithmField != "":
		return errors.New("algorithm: give one algorithm, or a field that chooses it, not both")
	case cfg.Algorithm != "":
		a, err := lookupAlgorithm(cfg.Algorithm)
		if err != nil {
			return fmt.Errorf("algorithm: %v", err)
		}
		v.alg, v.family = a, a.family
		return nil
	case cfg.AlgorithmField == "":
		return errors.New("algorithm: required")
	}
	src, err := parseSource(cfg.AlgorithmField, v.paths, fromHeader, fromJSON, fromQuery)
	if err != nil {
		return fmt.Errorf("algorithm: %v", err)
	}
	if len(cfg.AlgorithmValues) == 0 {
		return fmt.Errorf("algorithm: %s chooses among no algorithms: map its values to algorithms", cfg.AlgorithmField)
	}
	v.algField, v.algValues = src, make(map[string]*algorithm, len(cfg.AlgorithmValues))
	first := true
	for val, name := range cfg.AlgorithmValues {
		a, err := lookupAlgorithm(name)
		if err != nil {
			return fmt.Errorf("algorithm: value %q: %v", val, err)
		}
		if !first && a.family != v.family {
			return fmt.Errorf("algorithm: %s takes %s keys, another value's algorithm %s keys: one kind of key for all", a.name, a.family, v.family)
		}
		first, v.family = false, a.family
		v.algValues[val] = a
	}
	return nil
}

func (v *templateVerifier) setSignature(loc SignatureLocation) error {
	if loc.From == "" {
		return errors.New("signature: required (header:<Name>, json:<path> or query:<name>)")
	}
	src, err := parseSource(loc.From, v.paths, fromHeader, fromJSON, fromQuery)
	if err != nil {
		return fmt.Errorf("signature: %v", err)
	}
	v.sig, v.prefix, v.separator = src, loc.Prefix, loc.Separator
	switch strings.ToLower(loc.Encoding) {
	case "":
		v.encoding = Base64
		if v.family == familyHMAC {
			v.encoding = Hex
		}
	case "hex":
		v.encoding = Hex
	case "base64":
		v.encoding = Base64
	default:
		return fmt.Errorf("signature: encoding %q: want hex or base64", loc.Encoding)
	}
	switch strings.ToLower(loc.Format) {
	case "", "der":
	case "raw":
		v.rawECDSA = true
	default:
		return fmt.Errorf("signature: format %q: want der or raw", loc.Format)
	}
	if loc.Format != "" && v.family != familyECDSA {
		return fmt.Errorf("signature: format applies to ECDSA signatures, not %s", v.family)
	}
	return nil
}

func (v *templateVerifier) setTimestamp(cfg TemplateConfig) error {
	if cfg.Tolerance < 0 {
		return errors.New("tolerance: must not be negative")
	}
	v.tolerance = toleranceOrDefault(cfg.Tolerance)
	if cfg.Timestamp.From == "" {
		if cfg.Timestamp.Unit != "" {
			return errors.New("timestamp: a unit without a timestamp")
		}
		return nil
	}
	src, err := parseSource(cfg.Timestamp.From, v.paths, fromHeader, fromJSON, fromQuery)
	if err != nil {
		return fmt.Errorf("timestamp: %v", err)
	}
	v.ts = src
	switch strings.ToLower(cfg.Timestamp.Unit) {
	case "", "s":
		v.unit = unitSeconds
	case "ms":
		v.unit = unitMillis
	case "rfc3339":
		v.unit = unitRFC3339
	default:
		return fmt.Errorf("timestamp: unit %q: want s, ms or rfc3339", cfg.Timestamp.Unit)
	}
	return nil
}

func (v *templateVerifier) setKeys(cfg TemplateConfig) error {
	if v.family == familyHMAC {
		if len(cfg.PublicKeys) > 0 || cfg.CertURL.From != "" {
			return errors.New("public_key: an HMAC algorithm takes secrets, not public keys or certificates")
		}
		secrets, err := decodeSecrets(cfg.Secrets, cfg.SecretEncoding)
		if err != nil {
			return err
		}
		v.keyrings = make(map[*algorithm]keyring)
		for _, a := range v.allAlgorithms() {
			v.keyrings[a] = newHMACKeyring(newHash(a.hash), secrets)
		}
		return nil
	}
	if len(cfg.Secrets) > 0 || cfg.SecretEncoding != "" {
		return fmt.Errorf("secret: %s takes a public key or a certificate, not secrets", v.family)
	}
	switch {
	case len(cfg.PublicKeys) > 0 && cfg.CertURL.From != "":
		return errors.New("public_key: give public keys or cert_url, not both")
	case cfg.CertURL.From != "":
		src, err := parseSource(cfg.CertURL.From, v.paths, fromHeader, fromJSON)
		if err != nil {
			return fmt.Errorf("cert_url: %v", err)
		}
		f, err := newCertFetcher(cfg.CertURL, v.family)
		if err != nil {
			return fmt.Errorf("cert_url: %v", err)
		}
		v.certURL, v.certs = src, f
		return nil
	case len(cfg.PublicKeys) == 0:
		return fmt.Errorf("public_key: %s needs public keys or cert_url", v.family)
	}
	for i, s := range cfg.PublicKeys {
		k, err := parsePublicKey(v.family, s)
		if err != nil {
			return fmt.Errorf("public_key %d: %v", i+1, err)
		}
		v.keys = append(v.keys, k)
	}
	return nil
}

// allAlgorithms lists the algorithms the verifier may use.
func (v *templateVerifier) allAlgorithms() []*algorithm {
	if v.alg != nil {
		return []*algorithm{v.alg}
	}
	all := make([]*algorithm, 0, len(v.algValues))
	for _, a := range v.algValues {
		all = append(all, a)
	}
	return all
}

// decodeSecrets decodes the secrets as encoding says.
func decodeSecrets(secrets []string, encoding string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("secret: an HMAC algorithm needs a secret")
	}
	out := make([][]byte, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return nil, fmt.Errorf("secret %d: empty", i+1)
		}
		var err error
		switch strings.ToLower(encoding) {
		case "", "raw":
			out[i] = []byte(s)
		case "hex":
			out[i], err = hex.DecodeString(strings.TrimSpace(s))
		case "base64":
			out[i], err = base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		default:
			return nil, fmt.Errorf("secret_encoding %q: want raw, hex or base64", encoding)
		}
		if err != nil || len(out[i]) == 0 {
			// the error would quote the secret: say what it is not
			return nil, fmt.Errorf("secret %d: not %s", i+1, strings.ToLower(encoding))
		}
	}
	return out, nil
}

func (v *templateVerifier) setItems(items string) error {
	if items == "" {
		return nil
	}
	path, ok := strings.CutPrefix(items, "json:")
	if !ok {
		return fmt.Errorf("items: %q: want json:<path to the array>.#[.<path to the item>]", items)
	}
	before, after, found := strings.Cut(path, ".#")
	if !found || (after != "" && after[0] != '.') || strings.Contains(after, ".#") {
		return fmt.Errorf("items: %q: want json:<path to the array>.#[.<path to the item>], with one #", items)
	}
	ip := &itemPaths{array: newJSONPaths()}
	if _, err := ip.array.add(before); err != nil {
		return fmt.Errorf("items: %v", err)
	}
	if after != "" {
		ip.inner = newJSONPaths()
		if _, err := ip.inner.add(after[1:]); err != nil {
			return fmt.Errorf("items: %v", err)
		}
	}
	if v.sig.kind != fromJSON {
		return errors.New("items: the items are signed one by one, so the signature is in each: read it with signature json:<path within the item>")
	}
	v.items = ip
	return nil
}

// templateState is one request's working memory, pooled.
type templateState struct {
	spans   []jsonSpan // the values of the JSON paths
	item    [1]jsonSpan
	include []bool // per optional part, whether it is signed
	msg     []byte // the message, the body left out at bodyAt
	bodyAt  []int
	vals    []byte // decoded JSON strings
	cands   [maxSignatures]string
	sigBuf  [maxRSABytes + 2]byte
	digest  [64]byte
	crc     struct {
		done bool
		v    uint32
	}
	sha struct {
		done bool
		v    [sha256.Size]byte
	}
}

// Verify implements Verifier.
func (v *templateVerifier) Verify(r *http.Request, body []byte) error {
	st := v.states.Get().(*templateState)
	defer v.release(st)
	if v.items != nil {
		return v.verifyItems(st, r, body)
	}
	if v.paths.leaves > 0 {
		if err := v.paths.readJSON(body, st.spans); err != nil {
			return err
		}
	}
	return v.verifyOne(st, r, body)
}

// release gives a state back to the pool, unless a long body or URL
// grew it.
func (v *templateVerifier) release(st *templateState) {
	if cap(st.msg) > 64<<10 || cap(st.vals) > 64<<10 {
		return
	}
	st.msg, st.vals, st.bodyAt = st.msg[:0], st.vals[:0], st.bodyAt[:0]
	st.crc.done, st.sha.done = false, false
	v.states.Put(st)
}

// verifyItems verifies every item of a delivery in Items mode.
func (v *templateVerifier) verifyItems(st *templateState, r *http.Request, body []byte) error {
	arr := st.item[:]
	if err := v.items.array.readJSON(body, arr); err != nil {
		return err
	}
	if arr[0].start < 0 {
		return ErrMissing
	}
	if body[arr[0].start] != '[' {
		return ErrInvalid
	}
	es := jsonScanner{b: body, i: arr[0].start + 1}
	es.space()
	if es.i < len(body) && body[es.i] == ']' {
		return ErrMissing
	}
	for n := 1; ; n++ {
		if n > v.maxItems {
			return ErrInvalid
		}
		item := jsonSpan{start: es.i}
		if v.items.inner != nil {
			if err := v.items.inner.readAt(&es, arr); err != nil {
				return err
			}
			item = arr[0]
		} else {
			if err := es.skipValue(); err != nil {
				return err
			}
			item.end = es.i
		}
		if item.start < 0 {
			return ErrMissing
		}
		is := jsonScanner{b: body, i: item.start}
		if err := v.paths.readAt(&is, st.spans); err != nil {
			return err
		}
		if err := v.verifyOne(st, r, body); err != nil {
			return err
		}
		if done, err := es.next(']'); err != nil || done {
			return err
		}
	}
}

// verifyOne verifies one signed message (the delivery, or an item of it),
// its JSON fields read into st.spans.
func (v *templateVerifier) verifyOne(st *templateState, r *http.Request, body []byte) error {
	st.vals = st.vals[:0]
	a := v.alg
	if a == nil {
		val, ok, err := v.value(st, v.algField, r, body)
		if err != nil {
			return err
		}
		if !ok {
			return ErrMissing
		}
		if a = v.algValues[val]; a == nil {
			return ErrInvalid
		}
	}
	if v.ts.kind != 0 {
		if err := v.checkTimestamp(st, r, body); err != nil {
			return err
		}
	}
	limit := maxAsymmetric
	if a.family == familyHMAC {
		limit = maxSignatures
	}
	n, err := v.candidates(st, r, body, limit)
	if err != nil {
		return err
	}
	if a.family == familyHMAC {
		var sigs sigSet
		for _, c := range st.cands[:n] {
			sigs.add(v.encoding, c)
		}
		if err := v.build(st, r, body, false); err != nil {
			return err
		}
		if !v.keyrings[a].matchFunc(&sigs, func(h hash.Hash) { st.writeTo(h, body) }) {
			return ErrInvalid
		}
		return nil
	}
	keys := v.keys
	if v.certs != nil {
		k, err := v.certKey(st, r, body)
		if err != nil {
			return err
		}
		keys = []crypto.PublicKey{k}
	}
	if err := v.build(st, r, body, a.family == familyEd25519); err != nil {
		return err
	}
	var digest []byte
	if a.family != familyEd25519 {
		h := digests[a.hash].Get().(hash.Hash)
		h.Reset()
		st.writeTo(h, body)
		digest = h.Sum(st.digest[:0])
		digests[a.hash].Put(h)
	}
	for _, c := range st.cands[:n] {
		sig, ok := decodeRSASignature(st.sigBuf[:], v.encoding, c)
		if !ok {
			continue
		}
		for _, k := range keys {
			if verifyPublic(a, k, st.msg, digest, sig, v.rawECDSA) {
				return nil
			}
		}
	}
	return ErrInvalid
}

// certKey returns the key of the certificate the delivery names.
func (v *templateVerifier) certKey(st *templateState, r *http.Request, body []byte) (crypto.PublicKey, error) {
	u, ok, err := v.value(st, v.certURL, r, body)
	if err != nil {
		return nil, err
	}
	if !ok || u == "" {
		return nil, ErrMissing
	}
	return v.certs.key(r.Context(), u)
}

// checkTimestamp checks the signed time against the tolerance.
func (v *templateVerifier) checkTimestamp(st *templateState, r *http.Request, body []byte) error {
	val, ok, err := v.value(st, v.ts, r, body)
	if err != nil {
		return err
	}
	if val = strings.TrimSpace(val); !ok || val == "" {
		return ErrMissing
	}
	var t time.Time
	switch v.unit {
	case unitRFC3339:
		if t, err = time.Parse(time.RFC3339Nano, val); err != nil {
			return ErrInvalid
		}
	default:
		n, ok := parseUint(val)
		if !ok {
			return ErrInvalid
		}
		if v.unit == unitMillis {
			t = time.UnixMilli(int64(n))
		} else {
			t = time.Unix(int64(n), 0)
		}
	}
	return withinTolerance(t, v.tolerance)
}

// candidates puts the delivery's signatures, as written (prefix removed),
// in st.cands, at most limit of them; ErrMissing when there is no value,
// ErrInvalid when no value holds a signature.
func (v *templateVerifier) candidates(st *templateState, r *http.Request, body []byte, limit int) (int, error) {
	n, seen := 0, 0
	switch v.sig.kind {
	case fromHeader:
		values, err := headerValues(r.Header, v.sig.name)
		if err != nil {
			return 0, err
		}
		for _, val := range values {
			n, seen = v.split(st, val, n, seen, limit)
		}
	default:
		val, ok, err := v.value(st, v.sig, r, body)
		if err != nil {
			return 0, err
		}
		if !ok || strings.TrimSpace(val) == "" {
			return 0, ErrMissing
		}
		n, _ = v.split(st, val, n, seen, limit)
	}
	if n == 0 {
		return 0, ErrInvalid
	}
	return n, nil
}

// split adds the signatures of one value to st.cands.
func (v *templateVerifier) split(st *templateState, val string, n, seen, limit int) (int, int) {
	for val != "" && n < limit && seen < maxHeaderItems {
		item := val
		if v.separator != "" {
			item, val, _ = strings.Cut(val, v.separator)
		} else {
			val = ""
		}
		seen++
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		if v.prefix != "" {
			var ok bool
			if item, ok = strings.CutPrefix(item, v.prefix); !ok {
				continue
			}
		}
		st.cands[n] = item
		n++
	}
	return n, seen
}

// value returns the value of a source and whether it is there. A JSON
// string is decoded (into st.vals); other JSON values are as written.
func (v *templateVerifier) value(st *templateState, src source, r *http.Request, body []byte) (string, bool, error) {
	switch src.kind {
	case fromHeader:
		if len(r.Header[src.name]) == 0 {
			return "", false, nil
		}
		return headerValue(r.Header, src.name), true, nil
	case fromQuery:
		val, ok := queryParam(r.URL.RawQuery, src.name)
		return val, ok, nil
	}
	sp := st.spans[src.leaf]
	if sp.start < 0 {
		return "", false, nil
	}
	lit := body[sp.start:sp.end]
	if lit[0] != '"' {
		return bytesView(lit), true, nil
	}
	if !hasEscape(lit) {
		return bytesView(lit[1 : len(lit)-1]), true, nil
	}
	start := len(st.vals)
	var ok bool
	if st.vals, ok = appendJSONString(st.vals, lit); !ok {
		return "", false, ErrInvalid
	}
	return bytesView(st.vals[start:]), true, nil
}

// hasEscape reports whether a JSON string literal has a backslash.
func hasEscape(lit []byte) bool {
	for _, c := range lit {
		if c == '\\' {
			return true
		}
	}
	return false
}

// build writes the message into st.msg: the body itself when inline is
// set, else its places in st.bodyAt (the body is written to the hash
// where it is, not copied).
func (v *templateVerifier) build(st *templateState, r *http.Request, body []byte, inline bool) error {
	t := v.tmpl
	for g, rng := range t.groups {
		st.include[g] = v.present(st, t.parts[rng.from:rng.to], r)
	}
	msg := st.msg[:0]
	st.bodyAt = st.bodyAt[:0]
	for i := range t.parts {
		p := &t.parts[i]
		if p.group >= 0 && !st.include[p.group] {
			continue
		}
		switch p.kind {
		case partText:
			msg = append(msg, p.text...)
		case partBody:
			if inline {
				msg = append(msg, body...)
			} else {
				st.bodyAt = append(st.bodyAt, len(msg))
			}
		case partMethod:
			msg = append(msg, r.Method...)
		case partURL:
			msg = v.publicURL(msg, r)
		case partCRC32:
			if !st.crc.done {
				st.crc.v, st.crc.done = crc32.ChecksumIEEE(body), true
			}
			msg = strconv.AppendUint(msg, uint64(st.crc.v), 10)
		case partSHA256:
			if !st.sha.done {
				st.sha.v, st.sha.done = sha256.Sum256(body), true
			}
			msg = hex.AppendEncode(msg, st.sha.v[:])
		case partHeader:
			msg = append(msg, headerValue(r.Header, p.text)...)
		case partQuery:
			val, _ := queryParam(r.URL.RawQuery, p.text)
			msg = append(msg, val...)
		case partJSON:
			sp := st.spans[p.leaf]
			if sp.start < 0 {
				continue
			}
			lit := body[sp.start:sp.end]
			if lit[0] != '"' {
				msg = append(msg, lit...)
				continue
			}
			var ok bool
			if msg, ok = appendJSONString(msg, lit); !ok {
				st.msg = msg
				return ErrInvalid
			}
		}
	}
	st.msg = msg
	return nil
}

// present reports whether every field of an optional part is there.
func (v *templateVerifier) present(st *templateState, parts []part, r *http.Request) bool {
	for i := range parts {
		p := &parts[i]
		switch p.kind {
		case partHeader:
			if len(r.Header[p.text]) == 0 {
				return false
			}
		case partQuery:
			if _, ok := queryParam(r.URL.RawQuery, p.text); !ok {
				return false
			}
		case partJSON:
			if st.spans[p.leaf].start < 0 {
				return false
			}
		}
	}
	return true
}

// writeTo writes the message to h, the body at its places.
func (st *templateState) writeTo(h hash.Hash, body []byte) {
	prev := 0
	for _, at := range st.bodyAt {
		h.Write(st.msg[prev:at])
		h.Write(body)
		prev = at
	}
	h.Write(st.msg[prev:])
}

var _ Verifier = (*templateVerifier)(nil)
