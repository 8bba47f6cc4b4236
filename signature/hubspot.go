package signature

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"time"
)

// NewHubSpot returns HubSpot's v3 scheme: `X-HubSpot-Signature-v3`, the
// base64 of an HMAC-SHA256 of `{method}{url}{body}{timestamp}` keyed with
// the app's client secret, where url is the URL HubSpot called (given by
// publicURL, which must not be nil) with the percent-encoded characters
// `: / ? @ ! $ ' ( ) * , ;` decoded, and timestamp is
// `X-HubSpot-Request-Timestamp` in Unix milliseconds, which must be within
// tolerance of the current time (DefaultTolerance, HubSpot's five
// minutes, when zero). It follows HubSpot's "Validating requests"
// (validate the v3 request signature) and Signature.get_signature of
// HubSpot's Python client (hubspot-api-python).
func NewHubSpot(secrets []string, publicURL PublicURL, tolerance time.Duration) Verifier {
	return &hubSpotVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(secrets)),
		url:       publicURL,
		tolerance: toleranceOrDefault(tolerance),
	}
}

// hubSpotVerifier is the scheme of NewHubSpot.
type hubSpotVerifier struct {
	keys      keyring
	url       PublicURL
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *hubSpotVerifier) Verify(r *http.Request, body []byte) error {
	ts := headerValue(r.Header, "X-Hubspot-Request-Timestamp")
	var sigs sigSet
	if err := base64Signature(&sigs, r.Header, "X-Hubspot-Signature-V3"); err != nil || ts == "" {
		return ErrMissing
	}
	ms, ok := parseUint(ts)
	if !ok {
		return ErrInvalid
	}
	if err := withinTolerance(time.UnixMilli(int64(ms)), v.tolerance); err != nil {
		return err
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(*msg, r.Method...)
	start := len(*msg)
	*msg = v.url(*msg, r)
	*msg = decodeHubSpotURL(*msg, start)
	// the timestamp, signed after the body, goes in the same buffer
	head := len(*msg)
	*msg = append(*msg, ts...)
	return v.keys.checkTail((*msg)[:head], body, (*msg)[head:], &sigs)
}

// decodeHubSpotURL decodes, in place from b[start:], the percent-encoded
// characters HubSpot decodes before signing a URL: `%3A %2F %3F %40 %21
// %24 %27 %28 %29 %2A %2C %3B` (either case). Other escapes are kept.
func decodeHubSpotURL(b []byte, start int) []byte {
	w := start
	for r := start; r < len(b); r++ {
		c := b[r]
		if c == '%' && r+2 < len(b) {
			if d, ok := hubSpotDecoded(b[r+1], b[r+2]); ok {
				b[w] = d
				w++
				r += 2
				continue
			}
		}
		b[w] = c
		w++
	}
	return b[:w]
}

// hubSpotDecoded maps the two hex digits of an escape to the character
// HubSpot decodes, if it is one of them.
func hubSpotDecoded(hi, lo byte) (byte, bool) {
	if !validHex(hi) || !validHex(lo) {
		return 0, false
	}
	c := unhex(hi)<<4 | unhex(lo)
	if strings.IndexByte(":/?@!$'()*,;", c) < 0 {
		return 0, false
	}
	return c, true
}

func validHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

var _ Verifier = (*hubSpotVerifier)(nil)
