package signature

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Hook0's signature (hook0.com, an open-source webhook sender; Coinbase's
// CDP webhooks are delivered by it): `X-Hook0-Signature:
// t=<unix>[,v0=<hex>],h=<names>,v1=<hex>`. `v1` is the HMAC-SHA256 hex of
// `{t}.{h}.{values}.{body}`, where `h` names the request headers it
// covers (lower-case, separated by one space) and `values` are their
// values in that order, joined by `.`; `v0`, the older scheme, covers
// `{t}.{body}` alone. The list of headers comes with each delivery, so no
// template can say it: this is a scheme of its own. It follows Hook0's
// output worker (`Signature::new` in output-worker/src/work.rs), its Go
// client (clients/go/signature.go) and the shared vectors of its clients
// (clients/conformance/signature.json): when `v1` is given `v0` is never
// looked at (a weaker code must not rescue a wrong stronger one); a
// covered header the request does not carry is refused, never signed as
// empty; a code that is not whole hex is refused.

// Hook0Config configures NewHook0.
type Hook0Config struct {
	// Header carries the signature. Default: X-Hook0-Signature.
	Header string

	// Secrets are the subscriptions' secrets, used as written (several
	// for rotation).
	Secrets []string

	// Tolerance is how far `t` may be from the current time, either way.
	// Default: DefaultTolerance.
	Tolerance time.Duration

	// Require are headers (any case) the `v1` code must cover: a
	// delivery whose `h` leaves one out, or that offers only `v0`, is
	// ErrInvalid. A preset that keys deliveries on a header requires it,
	// so the key is signed (Coinbase's X-Event-Id).
	Require []string
}

// Limits of a Hook0 signature, those of Hook0's Go client.
const (
	hook0MaxHeader  = 8 << 10 // bytes of the signature header
	hook0MaxParts   = 32      // `name=value` parts
	hook0MaxCovered = 64      // names in `h`
)

// NewHook0 returns Hook0's scheme.
func NewHook0(cfg Hook0Config) (Verifier, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("secret: needs the subscription's secret")
	}
	v := &hook0Verifier{
		header:    http.CanonicalHeaderKey(cmp.Or(cfg.Header, "X-Hook0-Signature")),
		keys:      newHMACKeyring(sha256.New, rawSecrets(cfg.Secrets)),
		tolerance: toleranceOrDefault(cfg.Tolerance),
	}
	for _, name := range cfg.Require {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("require: %q is not a header name", name)
		}
		v.require = append(v.require, strings.ToLower(name))
	}
	slices.Sort(v.require)
	v.require = slices.Compact(v.require)
	return v, nil
}

// hook0Verifier is the scheme of NewHook0.
type hook0Verifier struct {
	header    string
	keys      keyring
	tolerance time.Duration
	require   []string // lower-case
}

// hook0Signature is a parsed signature header.
type hook0Signature struct {
	t, h   string
	v0, v1 sigSet
	hasV1  bool
}

// parseHook0 reads a signature header, refusing what it cannot read
// whole: more parts than the limit, a code that is not whole hex, no `t`
// or no code.
func parseHook0(value string) (hook0Signature, error) {
	var s hook0Signature
	if len(value) > hook0MaxHeader {
		return s, ErrInvalid
	}
	hasT, hasV0 := false, false
	for i := 0; value != ""; i++ {
		if i == hook0MaxParts {
			return s, ErrInvalid
		}
		var part string
		part, value, _ = strings.Cut(value, ",")
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(name) {
		case "t":
			s.t, hasT = val, true
		case "h":
			s.h = val
		case "v0":
			if !wholeHex(val) {
				return s, ErrInvalid
			}
			s.v0 = sigSet{}
			s.v0.add(Hex, val)
			hasV0 = true
		case "v1":
			if !wholeHex(val) {
				return s, ErrInvalid
			}
			s.v1 = sigSet{}
			s.v1.add(Hex, val)
			s.hasV1 = true
		}
	}
	if !hasT || s.t == "" {
		return s, ErrInvalid
	}
	if !hasV0 && !s.hasV1 {
		return s, ErrInvalid
	}
	return s, nil
}

// wholeHex reports whether s is a non-empty run of hex digit pairs.
func wholeHex(s string) bool {
	if s == "" || len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// Verify implements Verifier.
func (v *hook0Verifier) Verify(r *http.Request, body []byte) error {
	value := headerValue(r.Header, v.header)
	if value == "" {
		return ErrMissing
	}
	s, err := parseHook0(value)
	if err != nil {
		return err
	}
	if err := checkTimestamp(s.t, v.tolerance, false); err != nil {
		return err
	}
	if !s.hasV1 {
		if len(v.require) > 0 {
			// v0 covers no header: not the required ones
			return ErrInvalid
		}
		msg := getScratch()
		defer putScratch(msg)
		*msg = append(append(*msg, s.t...), '.')
		return v.keys.check(*msg, body, &s.v0)
	}
	msg := getScratch()
	defer putScratch(msg)
	m, err := appendHook0Covered(append(append(*msg, s.t...), '.'), r.Header, s.h, v.require)
	*msg = m
	if err != nil {
		return err
	}
	return v.keys.check(*msg, body, &s.v1)
}

// appendHook0Covered appends `{h}.{values}.` to msg: the names of h and
// the values of those headers in r, each name's n-th occurrence in h
// taking its n-th value (as Hook0 signs a header it sends twice). A name
// that is not a header name, a header r does not carry, more names than
// the limit, or a required name h leaves out is ErrInvalid.
func appendHook0Covered(msg []byte, h http.Header, names string, require []string) ([]byte, error) {
	msg = append(append(msg, names...), '.')
	var seen [hook0MaxCovered]string
	found := 0
	for n, rest := 0, names; rest != ""; n++ {
		if n == hook0MaxCovered {
			return msg, ErrInvalid
		}
		var name string
		name, rest, _ = strings.Cut(rest, " ")
		if !httpguts.ValidHeaderFieldName(name) {
			return msg, ErrInvalid
		}
		occurrence := 0
		for _, s := range seen[:n] {
			if strings.EqualFold(s, name) {
				occurrence++
			}
		}
		seen[n] = name
		var canon [64]byte
		// (indexing by string(bytes) does not allocate)
		values := h[string(appendCanonicalKey(canon[:0], name))]
		if occurrence >= len(values) {
			return msg, ErrInvalid
		}
		if n > 0 {
			msg = append(msg, '.')
		}
		msg = append(msg, values[occurrence]...)
		if occurrence == 0 && slices.ContainsFunc(require, func(r string) bool { return strings.EqualFold(r, name) }) {
			found++
		}
	}
	if found < len(require) {
		return msg, ErrInvalid
	}
	return append(msg, '.'), nil
}

// appendCanonicalKey appends name in the canonical form of http.Header's
// keys (a letter upper-case at the start and after a hyphen, lower-case
// elsewhere), for a name made of token characters.
func appendCanonicalKey(dst []byte, name string) []byte {
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
}

// NewHook0Signer signs as Hook0 does (NewHook0): `t`, then `h` naming
// those of covered (any case) the request carries, lower-case and sorted,
// and the `v1` code over them, with the subscription's secret. Hook0
// covers every header it sends; the signer covers the ones it is told to,
// and makes up an X-Event-Id when it is covered and r has none.
func NewHook0Signer(header, secret string, covered []string) (Signer, error) {
	if secret == "" {
		return nil, errors.New("needs the subscription's secret")
	}
	header = cmp.Or(header, "X-Hook0-Signature")
	names := make([]string, 0, len(covered))
	for _, c := range covered {
		if !httpguts.ValidHeaderFieldName(c) {
			return nil, fmt.Errorf("%q is not a header name", c)
		}
		names = append(names, strings.ToLower(c))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		if slices.Contains(names, "x-event-id") {
			idHeader(r, "X-Event-Id", "")
		}
		var sent []string
		for _, n := range names {
			if len(r.Header.Values(n)) > 0 {
				sent = append(sent, n)
			}
		}
		h := strings.Join(sent, " ")
		ts := unix(at)
		m := hmac.New(sha256.New, []byte(secret))
		write := func(s string) { m.Write([]byte(s)) }
		write(ts + "." + h + ".")
		for i, n := range sent {
			if i > 0 {
				write(".")
			}
			write(r.Header.Get(n))
		}
		write(".")
		m.Write(body)
		r.Header.Set(header, "t="+ts+",h="+h+",v1="+hex.EncodeToString(m.Sum(nil)))
		return body, nil
	}), nil
}

var _ Verifier = (*hook0Verifier)(nil)
