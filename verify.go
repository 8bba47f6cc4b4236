package webhookidempotency

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// VerifyConfig configures signature verification (SPEC §3.3, §5).
type VerifyConfig struct {
	// The verification scheme: a provider preset name (`stripe`,
	// `github`, …), `hmac` or `token` for the generic schemes, or `off`.
	// Default: the handler's provider, if any; else no verification.
	Scheme string `json:"scheme,omitempty"`

	// Secrets to verify with. A signature valid under any of them is
	// accepted (rotation). Placeholders such as `{env.X}` and
	// `{file./run/secrets/x}` are resolved at provision time.
	Secrets []string `json:"secrets,omitempty"`

	// The header that carries the signature or token. Default: the
	// scheme's own header; required for `hmac`, `token` and `evolution`.
	Header string `json:"header,omitempty"`

	// The HMAC hash for `hmac`: `sha1`, `sha256` or `sha512`.
	// Default: `sha256`.
	Algorithm string `json:"algorithm,omitempty"`

	// How the `hmac` signature is written: `hex` or `base64`.
	// Default: `hex`.
	Encoding string `json:"encoding,omitempty"`

	// A prefix in front of the `hmac` signature or the `token`, such as
	// `sha256=` or `Bearer `. When set, a header value without it is
	// rejected. Default: none.
	Prefix string `json:"prefix,omitempty"`

	// How far a signed timestamp may be from the current time, for the
	// schemes that sign one. Default: 5m.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`

	// The public URL the provider signs, for schemes that sign the URL
	// (`twilio`, `square`). The query string of the request is appended
	// unless this URL has one. Placeholders such as `{env.X}` are
	// resolved at provision time. Default: reconstructed from the
	// request: its Host and path, `https` when it came over TLS, and
	// `X-Forwarded-Proto`/`X-Forwarded-Host` only when the server marks
	// the request as coming from one of its `trusted_proxies`.
	URL string `json:"url,omitempty"`
}

// Verifier checks the signature of a request on its raw body. It must not
// modify the request or the body, and must compare in constant time.
type Verifier interface {
	// Verify returns nil when the request is authentic, or a
	// *VerificationError saying why not.
	Verify(r *http.Request, body []byte) error
}

// VerificationError is a failed verification; Reason goes to the client.
type VerificationError struct {
	// Reason is a short phrase safe to show the sender.
	Reason string
}

func (e *VerificationError) Error() string { return e.Reason }

// The reasons of SPEC §3.3.
var (
	errMissingSignature = &VerificationError{Reason: "missing signature"}
	errInvalidSignature = &VerificationError{Reason: "invalid signature"}
	errStaleTimestamp   = &VerificationError{Reason: "timestamp outside tolerance"}
)

// defaultTolerance is the default timestamp tolerance.
const defaultTolerance = 5 * time.Minute

// maxSignatures caps how many signatures of one request are considered, so
// that a header listing thousands of them costs no more than sixteen.
const maxSignatures = 16

// verifySchemes lists the generic schemes besides the provider presets.
var verifySchemes = map[string]bool{"hmac": true, "token": true, "off": true}

// knownScheme reports whether name is a verification scheme.
func knownScheme(name string) bool {
	_, isProvider := providers[name]
	return isProvider || verifySchemes[name]
}

// newVerifier builds the verifier of a scheme; cfg has its secrets resolved
// and its tolerance defaulted. Errors never contain a secret.
func newVerifier(cfg VerifyConfig) (Verifier, error) {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = caddy.Duration(defaultTolerance)
	}
	if cfg.URL != "" {
		u, err := caddy.NewReplacer().ReplaceOrErr(cfg.URL, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving url: %v", err)
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("url %q is not an absolute http(s) URL", u)
		}
		cfg.URL = u
	}
	switch cfg.Scheme {
	case "hmac":
		return newHMACVerifier(cfg)
	case "token":
		return newTokenVerifier(cfg)
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

// HMACVerifier is the generic `hmac` scheme: an HMAC of the raw body,
// written in one header in hex or base64, optionally after a prefix.
type HMACVerifier struct {
	header   string
	prefix   string
	encoding sigEncoding
	keys     keyring
}

// newHMACVerifier builds the `hmac` scheme.
func newHMACVerifier(cfg VerifyConfig) (*HMACVerifier, error) {
	if cfg.Header == "" {
		return nil, errors.New("a header is required (header <name> in the verify block)")
	}
	newHash, err := hashFunc(cfg.Algorithm)
	if err != nil {
		return nil, err
	}
	enc := encHex
	switch cfg.Encoding {
	case "", "hex":
	case "base64":
		enc = encBase64
	default:
		return nil, fmt.Errorf("invalid encoding %q: want hex or base64", cfg.Encoding)
	}
	if cfg.URL != "" {
		return nil, errors.New("hmac signs no url (the twilio and square schemes do)")
	}
	return &HMACVerifier{
		header:   http.CanonicalHeaderKey(cfg.Header),
		prefix:   cfg.Prefix,
		encoding: enc,
		keys:     newHMACKeyring(newHash, rawSecrets(cfg.Secrets)),
	}, nil
}

// Verify implements Verifier.
func (v *HMACVerifier) Verify(r *http.Request, body []byte) error {
	values := r.Header[v.header]
	if len(values) == 0 {
		return errMissingSignature
	}
	var sigs sigSet
	for _, val := range values {
		val = strings.TrimSpace(val)
		if v.prefix != "" {
			var ok bool
			if val, ok = strings.CutPrefix(val, v.prefix); !ok {
				continue
			}
		}
		if !sigs.add(v.encoding, val) {
			break
		}
	}
	if !v.keys.match(nil, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// TokenVerifier is the generic `token` scheme: a header whose value is a
// shared secret, compared in constant time (and without revealing its
// length, as both sides are hashed first).
type TokenVerifier struct {
	header string
	prefix string
	tokens tokenSet
}

// newTokenVerifier builds the `token` scheme.
func newTokenVerifier(cfg VerifyConfig) (*TokenVerifier, error) {
	if cfg.Header == "" {
		return nil, errors.New("a header is required (header <name> in the verify block)")
	}
	if cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" {
		return nil, errors.New("a token takes no algorithm, encoding or url")
	}
	return &TokenVerifier{header: http.CanonicalHeaderKey(cfg.Header), prefix: cfg.Prefix, tokens: newTokenSet(cfg.Secrets)}, nil
}

// Verify implements Verifier.
func (v *TokenVerifier) Verify(r *http.Request, _ []byte) error {
	val := headerValue(r.Header, v.header)
	if val == "" {
		return errMissingSignature
	}
	if v.prefix != "" {
		var ok bool
		if val, ok = strings.CutPrefix(val, v.prefix); !ok {
			return errInvalidSignature
		}
	}
	if !v.tokens.match(val) {
		return errInvalidSignature
	}
	return nil
}

// headerValue is the first value of a header given by its canonical name;
// unlike http.Header.Get it does not allocate to canonicalize the name.
func headerValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// hashFunc maps an `algorithm` value to its hash.
func hashFunc(name string) (func() hash.Hash, error) {
	switch name {
	case "", "sha256":
		return sha256.New, nil
	case "sha1":
		return sha1.New, nil
	case "sha512":
		return sha512.New, nil
	}
	return nil, fmt.Errorf("invalid algorithm %q: want sha1, sha256 or sha512", name)
}

// rawSecrets returns the secrets as the bytes they are written with.
func rawSecrets(secrets []string) [][]byte {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return keys
}

// sigEncoding is how a signature is written in a header.
type sigEncoding uint8

const (
	encHex sigEncoding = iota
	encBase64
)

// sigSet holds the decoded signatures of one request, at most
// maxSignatures of them, without allocating.
type sigSet struct {
	n    int
	seen int
	size [maxSignatures]uint8
	sig  [maxSignatures][sha512.Size]byte
}

// add decodes one signature; undecodable ones are skipped (they cannot
// match). It reports false once maxSignatures candidates were seen, so
// callers stop parsing.
func (s *sigSet) add(enc sigEncoding, v string) bool {
	if s.seen >= maxSignatures {
		return false
	}
	s.seen++
	// copying into an array on the stack decodes without allocating
	var src [2 * sha512.Size]byte
	if len(v) > len(src) {
		return true
	}
	copy(src[:], v)
	var n int
	var err error
	switch enc {
	case encHex:
		if len(v)%2 != 0 {
			return true
		}
		n, err = hex.Decode(s.sig[s.n][:], src[:len(v)])
	case encBase64:
		// room for the longest input taken, which may decode to more
		// than a signature (and then cannot match)
		var tmp [len(src) * 3 / 4]byte
		n, err = base64.StdEncoding.Decode(tmp[:], src[:len(v)])
		if err == nil && n <= sha512.Size {
			copy(s.sig[s.n][:], tmp[:n])
		} else {
			err = errInvalidSignature
		}
	}
	if err != nil || n == 0 {
		return true
	}
	s.size[s.n] = uint8(n)
	s.n++
	return true
}

// macKey computes one secret's MAC. Hash states are pooled: Verify runs
// concurrently, and a keyed HMAC state is expensive to rebuild.
type macKey struct {
	pool sync.Pool // of *macState
	pre  []byte    // written after every reset (the token of a keyed digest)
}

// macState is a pooled hash state and room for its sum.
type macState struct {
	h   hash.Hash
	sum [sha512.Size]byte
}

// keyring holds one macKey per secret (rotation).
type keyring []*macKey

// newHMACKeyring precomputes an HMAC key per secret.
func newHMACKeyring(newHash func() hash.Hash, secrets [][]byte) keyring {
	kr := make(keyring, len(secrets))
	for i, secret := range secrets {
		secret := secret
		kr[i] = &macKey{pool: sync.Pool{New: func() any {
			return &macState{h: hmac.New(newHash, secret)}
		}}}
	}
	return kr
}

// newDigestKeyring builds keys that hash `{secret}{sep}{message}` with a
// plain digest instead of an HMAC (PagBank).
func newDigestKeyring(newHash func() hash.Hash, secrets []string, sep string) keyring {
	kr := make(keyring, len(secrets))
	for i, secret := range secrets {
		kr[i] = &macKey{
			pool: sync.Pool{New: func() any { return &macState{h: newHash()} }},
			pre:  []byte(secret + sep),
		}
	}
	return kr
}

// match reports whether the MAC of msg followed by body, under any key,
// equals any of sigs. Every comparison is constant-time.
func (kr keyring) match(msg, body []byte, sigs *sigSet) bool {
	if sigs.n == 0 {
		return false
	}
	for _, k := range kr {
		st := k.pool.Get().(*macState)
		st.h.Reset()
		if len(k.pre) > 0 {
			st.h.Write(k.pre)
		}
		st.h.Write(msg)
		st.h.Write(body)
		sum := st.h.Sum(st.sum[:0])
		ok := 0
		for i := 0; i < sigs.n; i++ {
			ok |= subtle.ConstantTimeCompare(sum, sigs.sig[i][:sigs.size[i]])
		}
		k.pool.Put(st)
		if ok == 1 {
			return true
		}
	}
	return false
}

// tokenSet holds the SHA-256 of each accepted token; comparing digests in
// constant time does not reveal a token's length.
type tokenSet [][sha256.Size]byte

func newTokenSet(secrets []string) tokenSet {
	ts := make(tokenSet, len(secrets))
	for i, s := range secrets {
		ts[i] = sha256.Sum256([]byte(s))
	}
	return ts
}

// match reports whether v is one of the tokens.
func (ts tokenSet) match(v string) bool {
	got := sha256.Sum256([]byte(v))
	ok := 0
	for i := range ts {
		ok |= subtle.ConstantTimeCompare(got[:], ts[i][:])
	}
	return ok == 1
}

// scratchPool holds buffers for the signed message that precedes the body
// (`{t}.`, `v0:{ts}:`, …).
var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

func getScratch() *[]byte { return scratchPool.Get().(*[]byte) }

func putScratch(b *[]byte) {
	if cap(*b) > 64<<10 {
		return // do not keep a buffer a huge URL grew
	}
	*b = (*b)[:0]
	scratchPool.Put(b)
}

// checkTimestamp parses a Unix timestamp in seconds (or milliseconds, when
// millis is set and the value is that large) and checks it against the
// tolerance.
func checkTimestamp(v string, tolerance time.Duration, millis bool) error {
	ts, ok := parseUint(v)
	if !ok {
		return errInvalidSignature
	}
	var t time.Time
	if millis && ts >= 1e12 {
		t = time.UnixMilli(int64(ts))
	} else {
		t = time.Unix(int64(ts), 0)
	}
	d := now().Sub(t)
	if d > tolerance || d < -tolerance {
		return errStaleTimestamp
	}
	return nil
}

// parseUint parses a decimal number of at most 15 digits (seconds or
// milliseconds for millennia), without signs or spaces.
func parseUint(v string) (uint64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// Interface guards
var (
	_ Verifier = (*HMACVerifier)(nil)
	_ Verifier = (*TokenVerifier)(nil)
	_ error    = (*VerificationError)(nil)
)

// provisionVerifier builds the verifier from the provider and the verify
// block, resolving secret placeholders.
func (h *Handler) provisionVerifier() error {
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
	if len(cfg.Secrets) == 0 && cfg.Scheme != "stone" {
		return fmt.Errorf("%s verification needs at least one secret (or `verify off`)", cfg.Scheme)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = caddy.Duration(defaultTolerance)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return fmt.Errorf("%s verification: %v", cfg.Scheme, err)
	}
	h.verifier = v
	return nil
}
