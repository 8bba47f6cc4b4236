package signature

import (
	"crypto"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/unicode/norm"
)

// TemplateConfig configures NewTemplate, the generic scheme for providers
// without a scheme of their own: a string to sign written as a template
// over the request, an algorithm, where the signature (and a timestamp)
// are, and the key material. Each field is checked by NewTemplate, whose
// errors start with the option's name in the module's Caddyfile (`string`,
// `algorithm`, `signature`, `timestamp`, `tolerance`, `secret`,
// `secret_encoding`, `public_key`, `cert_url`, `items`, `max_items`).
type TemplateConfig struct {
	// String is the template of the signed message: text, fields in
	// braces and optional parts in brackets, as the package documentation
	// describes (Templates). Required, except with Token, which signs
	// nothing and takes none.
	String string

	// Algorithm is one of HMACSHA1, HMACSHA256, HMACSHA512, Ed25519,
	// ECDSAP256SHA256, RSASHA1, RSASHA256, RSAPSSSHA256 and Token.
	// Required unless AlgorithmField is set.
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
	// SecretEncoding says, or the tokens Token accepts, as written. The
	// HMAC algorithms and Token need them; the others refuse them.
	Secrets []string

	// SecretEncoding is how the secrets are written: "" or "raw" (used as
	// written), "hex" (Adyen's HMAC keys), "base64", "whsec" (Standard
	// Webhooks: an optional `whsec_` and the base64 of the key), "nfkd"
	// (the secret's Unicode NFKD form, as EasyPost keys its HMAC) or
	// "html_specialchars" (HTML's special characters written as
	// references, `&amp;` `&lt;` `&gt;` `&quot;` `&#039;` and their numeric
	// forms, decoded as WordPress's wp_specialchars_decode(…, ENT_QUOTES)
	// decodes them: WooCommerce's webhook secrets). Several
	// encodings separated by spaces make a key of each secret under each
	// encoding that decodes it, all of them tried: "whsec raw" for a
	// provider whose older secrets are used as written and newer ones
	// decoded (Polar). A secret that decodes under none is an error.
	// Default: raw.
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
	// `json:notificationItems.#.NotificationRequestItem`; `json:#` when
	// the body is the array. Every item must
	// verify; then every `json:` path of the configuration (fields of the
	// string, the signature, the timestamp, the certificate URL, the
	// algorithm field) is read within the item. No item is ErrMissing.
	Items string

	// MaxItems bounds the items of a delivery in Items mode; more is
	// ErrInvalid. Default: 1000.
	MaxItems int

	// Claims are members of the body (of each item in Items mode), by
	// their JSON path, each of which must hold one of the values listed
	// (compared as text, a string decoded); an absent one is ErrInvalid.
	// Each must be a {json.<path>} field of String, so that what is
	// checked is signed: AWS tells receivers of Amazon SNS messages to
	// "reject any message with an unexpected TopicArn".
	Claims map[string][]string

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
	// `v1,<a> v1,<b>` is Separator " " and Prefix "v1,"), or into items
	// of which those with Prefix are signatures (`t=…,v1=…,v1=…` is
	// Separator "," and Prefix "v1="). Any of them may match; at most 16
	// are looked at for an HMAC, 4 for the others.
	Separator string

	// Skip is how many items at the start of a separated value are not
	// signatures (Recurly's `<timestamp>,<sig>,<sig>` is Separator ","
	// and Skip 1). Default: 0.
	Skip int

	// Sets, when set, splits a value into sets that are verified one by
	// one, each with its own signatures (read within the set as
	// Separator and Prefix say) and its own timestamp when the timestamp
	// is in the same header: Persona's `t=…,v1=… t=…,v1=…` during a
	// rotation is Sets " ". A delivery is authentic when one set is. At
	// most 4 sets are looked at.
	Sets string
}

// TimestampLocation is where a template's signed time is.
type TimestampLocation struct {
	// From is `header:<Name>`, `json:<path>` or `query:<name>`; empty for
	// no timestamp.
	From string

	// Unit is "s" (Unix seconds), "ms" (Unix milliseconds) or "rfc3339".
	// Default: s.
	Unit string

	// Separator and Prefix take the timestamp out of a value that holds
	// more: the value is split at Separator and the timestamp is the
	// first item that starts with Prefix, Prefix removed (`t=…,v1=…` is
	// Separator "," and Prefix "t="; Recurly's `<timestamp>,<sig>` is
	// Separator "," alone: the first item). A timestamp in the header of
	// a signature with Sets is read within each set. Default: the whole
	// value.
	Separator string
	Prefix    string
}

// Defaults and bounds of NewTemplate.
const (
	// DefaultMaxItems bounds the items of a delivery in Items mode.
	DefaultMaxItems = 1000

	// maxSets bounds the sets of a signature value that are verified.
	maxSets = 4
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
	t := &stringTemplate{}
	if strings.TrimSpace(cfg.String) != "" {
		var err error
		if t, err = parseTemplate(cfg.String, v.paths); err != nil {
			return nil, fmt.Errorf("string: %v", err)
		}
	}
	v.tmpl = t
	if t.url && cfg.PublicURL == nil {
		return nil, errors.New("string: {url} needs the public URL the provider delivers to")
	}
	if err := v.setAlgorithms(cfg); err != nil {
		return nil, err
	}
	switch hasString := strings.TrimSpace(cfg.String) != ""; {
	case v.family == familyToken && hasString:
		return nil, errors.New("string: a token is compared as it is sent, nothing is signed: give no string")
	case v.family != familyToken && !hasString:
		return nil, errors.New("string: required")
	}
	if err := v.setSignature(cfg.Signature); err != nil {
		return nil, err
	}
	if err := v.setTimestamp(cfg); err != nil {
		return nil, err
	}
	if t.timestamp && v.ts.kind == 0 {
		return nil, errors.New("string: {timestamp} needs a timestamp")
	}
	if keys {
		if err := v.setKeys(cfg); err != nil {
			return nil, err
		}
	}
	if err := v.setItems(cfg.Items); err != nil {
		return nil, err
	}
	if err := v.setClaims(cfg.Claims); err != nil {
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
	skip      int
	sets      string
	encoding  Encoding
	rawECDSA  bool

	ts        source // (kind 0: none)
	unit      timeUnit
	tsSep     string
	tsPrefix  string
	tsInSet   bool // read within each set of the signature's value
	tolerance time.Duration

	keyrings map[*algorithm]keyring // HMAC
	tokens   tokenSet               // Token
	keys     []crypto.PublicKey     // public keys, or
	certURL  source
	certs    *certFetcher

	items    *itemPaths
	maxItems int

	claims []claimCheck

	states sync.Pool // of *templateState
}

// claimCheck is a signed member and the values it may hold.
type claimCheck struct {
	src    source
	values []string
}

// itemPaths is where the items of Items mode are: the array, and the
// item within each element.
type itemPaths struct {
	array *jsonPaths // one path, to the array; nil when the body is the array
	inner *jsonPaths // one path within an element; nil when the element is the item

	arrayPath, innerPath []string // their member names, for the signers
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
	v.sig, v.prefix, v.separator, v.skip, v.sets = src, loc.Prefix, loc.Separator, loc.Skip, loc.Sets
	switch {
	case loc.Skip < 0:
		return errors.New("signature: skip must not be negative")
	case loc.Skip > 0 && loc.Separator == "":
		return errors.New("signature: skip counts the items of a separated value: give a separator")
	case loc.Sets != "" && src.kind != fromHeader:
		return errors.New("signature: sets split a header's value")
	case loc.Sets != "" && loc.Sets == loc.Separator:
		return errors.New("signature: sets and separator must differ")
	case v.family == familyToken && loc.Encoding != "":
		return errors.New("signature: a token is compared as it is sent: it has no encoding")
	}
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
		if cfg.Timestamp.Unit != "" || cfg.Timestamp.Separator != "" || cfg.Timestamp.Prefix != "" {
			return errors.New("timestamp: a unit, separator or prefix without a timestamp")
		}
		return nil
	}
	if v.family == familyToken {
		return errors.New("timestamp: a token signs no time")
	}
	src, err := parseSource(cfg.Timestamp.From, v.paths, fromHeader, fromJSON, fromQuery)
	if err != nil {
		return fmt.Errorf("timestamp: %v", err)
	}
	v.ts, v.tsSep, v.tsPrefix = src, cfg.Timestamp.Separator, cfg.Timestamp.Prefix
	shared := v.sharesHeader()
	v.tsInSet = shared && v.sets != ""
	if shared && (v.tsSep == "" || v.tsSep != v.separator) {
		return errors.New("timestamp: in the signature's header, it is an item of the value: give the signature's separator")
	}
	if shared && v.tsPrefix == v.prefix && v.skip == 0 {
		return errors.New("timestamp: in the signature's header, a prefix or the signature's skip must tell it from the signatures")
	}
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
	if v.family == familyToken {
		switch {
		case len(cfg.PublicKeys) > 0 || cfg.CertURL.From != "":
			return errors.New("public_key: a token is one of the secrets, not a public key or a certificate")
		case cfg.SecretEncoding != "":
			return errors.New("secret_encoding: a token is compared as it is written")
		case len(cfg.Secrets) == 0:
			return errors.New("secret: a token needs the secrets it may be")
		}
		for i, s := range cfg.Secrets {
			if s == "" {
				return fmt.Errorf("secret %d: empty", i+1)
			}
		}
		v.tokens = newTokenSet(cfg.Secrets)
		return nil
	}
	if v.family == familyHMAC {
		if len(cfg.PublicKeys) > 0 || cfg.CertURL.From != "" {
			return errors.New("public_key: an HMAC algorithm takes secrets, not public keys or certificates")
		}
		secrets, _, err := decodeSecrets(cfg.Secrets, cfg.SecretEncoding)
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

// decodeSecrets decodes the secrets as encoding says (SecretEncoding):
// the keys of every secret, and those of the first alone.
func decodeSecrets(secrets []string, encoding string) (keys, first [][]byte, err error) {
	if len(secrets) == 0 {
		return nil, nil, errors.New("secret: an HMAC algorithm needs a secret")
	}
	encodings, err := secretEncodings(encoding)
	if err != nil {
		return nil, nil, err
	}
	for i, s := range secrets {
		if s == "" {
			return nil, nil, fmt.Errorf("secret %d: empty", i+1)
		}
		n := len(keys)
		for _, enc := range encodings {
			if k, ok := decodeSecret(s, enc); ok {
				keys = append(keys, k)
			}
		}
		if len(keys) == n {
			// the error would quote the secret: say what it is not
			return nil, nil, fmt.Errorf("secret %d: not %s", i+1, strings.Join(encodings, " nor "))
		}
		if i == 0 {
			first = keys[:len(keys):len(keys)]
		}
	}
	return keys, first, nil
}

// secretEncodings parses SecretEncoding: its words, "raw" for none.
func secretEncodings(encoding string) ([]string, error) {
	words := strings.Fields(strings.ToLower(encoding))
	if len(words) == 0 {
		return []string{"raw"}, nil
	}
	for i, w := range words {
		switch w {
		case "raw", "hex", "base64", "whsec", "nfkd", "html_specialchars":
		default:
			return nil, fmt.Errorf("secret_encoding %q: want raw, hex, base64, whsec, nfkd or html_specialchars", w)
		}
		if slices.Contains(words[:i], w) {
			return nil, fmt.Errorf("secret_encoding %q: given twice", w)
		}
	}
	return words, nil
}

// decodeSecret decodes one secret; ok is false when it is not written in
// that encoding.
func decodeSecret(s, encoding string) (key []byte, ok bool) {
	var err error
	switch encoding {
	case "raw":
		return []byte(s), true
	case "nfkd":
		// EasyPost: norm.NFKD.String(webhookSecret), its UTF-8 bytes
		return []byte(norm.NFKD.String(s)), true
	case "html_specialchars":
		// WooCommerce: wp_specialchars_decode($secret, ENT_QUOTES)
		return []byte(decodeHTMLSpecialChars(s)), true
	case "hex":
		key, err = hex.DecodeString(strings.TrimSpace(s))
	case "base64":
		key, err = base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	case "whsec":
		key, err = decodeWhsec(s)
	}
	return key, err == nil && len(key) > 0
}

// decodeWhsec decodes a Standard Webhooks secret: `whsec_` (optional, as
// in the reference library) followed by the base64 of the key.
func decodeWhsec(s string) ([]byte, error) {
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
}

func (v *templateVerifier) setClaims(claims map[string][]string) error {
	signed := map[int]bool{}
	for _, p := range v.tmpl.parts {
		if p.kind == partJSON {
			signed[p.leaf] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		values := claims[name]
		if len(values) == 0 {
			return fmt.Errorf("claim %q: at least one value", name)
		}
		before := v.paths.leaves
		src, err := parseSource("json:"+name, v.paths, fromJSON)
		if err != nil {
			return fmt.Errorf("claim: %v", err)
		}
		if v.paths.leaves != before || !signed[src.leaf] {
			return fmt.Errorf("claim %q: not a {json.%s} field of the string: only what is signed can be checked", name, name)
		}
		v.claims = append(v.claims, claimCheck{src: src, values: values})
	}
	return nil
}

func (v *templateVerifier) setItems(items string) error {
	if items == "" {
		return nil
	}
	path, ok := strings.CutPrefix(items, "json:")
	if !ok {
		return fmt.Errorf("items: %q: want json:<path to the array>.#[.<path to the item>]", items)
	}
	// the array is the body itself (`#`), or at a path (`a.b.#`)
	var before, after string
	switch {
	case path == "#":
	case strings.HasPrefix(path, "#."):
		after = path[1:]
	default:
		var found bool
		before, after, found = strings.Cut(path, ".#")
		if !found || (after != "" && after[0] != '.') {
			return fmt.Errorf("items: %q: want json:<path to the array>.#[.<path to the item>]", items)
		}
	}
	if strings.Contains(after, ".#") {
		return fmt.Errorf("items: %q: one # only", items)
	}
	ip := &itemPaths{}
	if before != "" {
		ip.array = newJSONPaths()
		if _, err := ip.array.add(before); err != nil {
			return fmt.Errorf("items: %v", err)
		}
		ip.arrayPath, _ = splitJSONPath(before)
	}
	if after != "" {
		ip.inner = newJSONPaths()
		if _, err := ip.inner.add(after[1:]); err != nil {
			return fmt.Errorf("items: %v", err)
		}
		ip.innerPath, _ = splitJSONPath(after[1:])
	}
	if v.sig.kind != fromJSON {
		return errors.New("items: the items are signed one by one, so the signature is in each: read it with signature json:<path within the item>")
	}
	v.items = ip
	return nil
}
