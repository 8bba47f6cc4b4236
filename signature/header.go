package signature

import (
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

// maxSignatures caps how many signatures of one request are considered, so
// that a header listing thousands of them costs no more than sixteen.
const maxSignatures = 16

// maxHeaderItems caps how many comma- or semicolon-separated items of a
// signature header are looked at.
const maxHeaderItems = 2 * maxSignatures

// now is the clock of timestamp checks; tests set it.
var now = time.Now

// headerValue is the first value of a header given by its canonical name,
// without surrounding white space; unlike http.Header.Get it does not
// allocate to canonicalize the name. A header that is absent, empty or
// blank is "": every scheme answers ErrMissing for it, one rule for all.
func headerValue(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// headerValues are the values of a repeated signature header given by its
// canonical name; ErrMissing when it has none that is not empty or blank,
// the rule of headerValue.
func headerValues(h http.Header, canonical string) ([]string, error) {
	values := h[canonical]
	for _, v := range values {
		if strings.TrimSpace(v) != "" {
			return values, nil
		}
	}
	return nil, ErrMissing
}

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
func (s *sigSet) add(enc Encoding, v string) bool {
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
	case Hex:
		if len(v)%2 != 0 {
			return true
		}
		n, err = hex.Decode(s.sig[s.n][:], src[:len(v)])
	case Base64:
		// room for the longest input taken, which may decode to more
		// than a signature (and then cannot match)
		var tmp [len(src) * 3 / 4]byte
		n, err = base64.StdEncoding.Decode(tmp[:], src[:len(v)])
		if err == nil && n <= sha512.Size {
			copy(s.sig[s.n][:], tmp[:n])
		} else {
			err = ErrInvalid
		}
	}
	if err != nil || n == 0 {
		return true
	}
	s.size[s.n] = uint8(n)
	s.n++
	return true
}

// base64Signature decodes into sigs the one base64 signature that the
// named header holds.
func base64Signature(sigs *sigSet, h http.Header, canonical string) error {
	sig := headerValue(h, canonical)
	if sig == "" {
		return ErrMissing
	}
	sigs.add(Base64, strings.TrimSpace(sig))
	return nil
}

// parseSignedList parses a header of sep-separated `key=value` items
// holding a timestamp (tsKey, the first one wins) and hex signatures
// (sigKey, any number up to the cap); other items are ignored. Spaces
// around items, keys and values are ignored.
func parseSignedList(h, sep, tsKey, sigKey string) (ts string, sigs sigSet, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", sigs, ErrMissing
	}
	for i := 0; h != "" && i < maxHeaderItems; i++ {
		var item string
		item, h, _ = strings.Cut(h, sep)
		k, val, _ := strings.Cut(item, "=")
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(k) {
		case tsKey:
			if ts == "" {
				ts = val
			}
		case sigKey:
			sigs.add(Hex, val)
		}
	}
	if ts == "" || sigs.seen == 0 {
		return "", sigs, ErrInvalid
	}
	return ts, sigs, nil
}

// checkTimestamp parses a Unix timestamp in seconds (or milliseconds, when
// millis is set and the value is that large) and checks it against the
// tolerance.
func checkTimestamp(v string, tolerance time.Duration, millis bool) error {
	ts, ok := parseUint(v)
	if !ok {
		return ErrInvalid
	}
	var t time.Time
	if millis && ts >= 1e12 {
		t = time.UnixMilli(int64(ts))
	} else {
		t = time.Unix(int64(ts), 0)
	}
	return withinTolerance(t, tolerance)
}

// withinTolerance checks a signed time against the tolerance, in the past
// and in the future.
func withinTolerance(t time.Time, tolerance time.Duration) error {
	d := now().Sub(t)
	if d > tolerance || d < -tolerance {
		return ErrTimestamp
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
