package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/url"
	"sort"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// NewTwilio returns Twilio's scheme: `X-Twilio-Signature`, HMAC-SHA1
// base64 of the public URL followed by the form parameters sorted by name,
// each written as name then value (a repeated parameter as each of its
// values, sorted). A JSON body is signed through the `bodySHA256` query
// parameter instead, which must be the SHA-256 hex of the body; a body
// that is not form-encoded, on a URL without `bodySHA256`, fails. Twilio
// signs the URL with or without the default port, so both are accepted.
// Each secret is an account's auth token; publicURL, which must not be
// nil, gives the URL Twilio delivered to. It follows Twilio's "Webhooks
// security" and twilio-go's RequestValidator.
func NewTwilio(secrets []string, publicURL PublicURL) Verifier {
	return &urlHMAC{header: "X-Twilio-Signature", twilio: true, keys: newHMACKeyring(sha1.New, rawSecrets(secrets)), url: publicURL}
}

// checkTwilio checks sigs against Twilio's message: the URL, already in
// msg, followed by the body's form parameters (or, when the URL carries
// `bodySHA256`, the URL alone, once that hash matches the body); if that
// does not match, the same message with the URL's default port added or
// removed.
func (v *urlHMAC) checkTwilio(msg *[]byte, body []byte, sigs *sigSet) error {
	urlLen := len(*msg)
	if bodyHash := query.Value(queryOf(string((*msg)[:urlLen])), "bodySHA256"); bodyHash != "" {
		sum := sha256.Sum256(body)
		var hexSum [2 * sha256.Size]byte
		hex.Encode(hexSum[:], sum[:])
		if subtle.ConstantTimeCompare(hexSum[:], []byte(strings.ToLower(bodyHash))) != 1 {
			return ErrInvalid
		}
	} else if len(body) > 0 {
		params, err := url.ParseQuery(string(body))
		if err != nil {
			return ErrInvalid
		}
		names := make([]string, 0, len(params))
		for name := range params {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			values := params[name]
			if len(values) > 1 {
				sort.Strings(values)
			}
			for _, val := range values {
				*msg = append(append(*msg, name...), val...)
			}
		}
	}
	if v.keys.match(*msg, nil, sigs) {
		return nil
	}
	// the same URL with the default port added, or removed
	other := getScratch()
	defer putScratch(other)
	*other = appendPortVariant(*other, string((*msg)[:urlLen]))
	if len(*other) == 0 {
		return ErrInvalid
	}
	*other = append(*other, (*msg)[urlLen:]...)
	return v.keys.check(*other, nil, sigs)
}

// queryOf returns the raw query of an absolute URL.
func queryOf(u string) string {
	_, q, _ := strings.Cut(u, "?")
	q, _, _ = strings.Cut(q, "#")
	return q
}

// appendPortVariant appends u with the default port of its scheme added
// when it has none, or with its port removed when it has one; it appends
// nothing when u cannot be split.
func appendPortVariant(dst []byte, u string) []byte {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return dst
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	host, tail := rest[:end], rest[end:]
	dst = append(append(dst, scheme...), "://"...)
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		dst = append(dst, host[:i]...)
	} else {
		port := ":80"
		if scheme == "https" {
			port = ":443"
		}
		dst = append(append(dst, host...), port...)
	}
	return append(dst, tail...)
}
