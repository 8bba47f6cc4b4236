package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// NewTwilio returns Twilio's scheme: `X-Twilio-Signature`, the HMAC
// (base64) of the public URL followed by the form parameters sorted by
// name, each written as name then value (a repeated parameter as each of
// its values, sorted). A JSON body is signed through the `bodySHA256`
// query parameter instead, which must be the SHA-256 hex of the body; a
// body that is not form-encoded, on a URL without `bodySHA256`, fails.
// Twilio signs the URL with or without the default port, so both are
// accepted. Each secret is an account's auth token or a SharedKey's
// secret; publicURL, which must not be nil, gives the URL Twilio delivered
// to. It follows Twilio's "Webhooks security" and twilio-go's
// RequestValidator.
//
// The hash is SHA-1 unless the delivery says otherwise: Twilio signs with
// a SharedKey when a Webhook Rule matches the URL, and then names the
// algorithm in `X-Twilio-Webhooks-Signature-Settings:
// key=<SharedKey sid>,algorithm=HMAC_SHA1|HMAC_SHA256`, read as
// twilio-node 6.3.1 reads it (getSignatureAlgorithm: the first non-empty
// `algorithm=` item, HMAC_SHA1 when there is none, case-insensitive); any
// other algorithm fails. Sources: Twilio Docs, "Sign webhooks with shared
// keys"; twilio-node 6.3.1, lib/webhooks/webhooks.js.
func NewTwilio(secrets []string, publicURL PublicURL) Verifier {
	keys := rawSecrets(secrets)
	return &urlHMAC{
		header: "X-Twilio-Signature", twilio: true, url: publicURL,
		keys:       newHMACKeyring(sha1.New, keys),
		twilioSHA2: newHMACKeyring(sha256.New, keys),
	}
}

// twilioSettingsHeader names the algorithm of a SharedKey signature.
const twilioSettingsHeader = "X-Twilio-Webhooks-Signature-Settings"

// twilioKeys returns the keyring of the algorithm the delivery names in
// X-Twilio-Webhooks-Signature-Settings, or false for an algorithm Twilio's
// libraries do not know.
func (v *urlHMAC) twilioKeys(h http.Header) (keyring, bool) {
	algorithm := ""
	settings := headerValue(h, twilioSettingsHeader)
	for i := 0; settings != "" && i < maxHeaderItems; i++ {
		var item string
		item, settings, _ = strings.Cut(settings, ",")
		k, val, ok := strings.Cut(item, "=")
		if ok && strings.TrimSpace(k) == "algorithm" {
			if val = strings.TrimSpace(val); val != "" {
				algorithm = val
				break
			}
		}
	}
	switch {
	case algorithm == "" || strings.EqualFold(algorithm, "HMAC_SHA1"):
		return v.keys, true
	case strings.EqualFold(algorithm, "HMAC_SHA256"):
		return v.twilioSHA2, true
	}
	return nil, false
}

// checkTwilio checks sigs against Twilio's message: the URL, already in
// msg, followed by the body's form parameters (or, when the URL carries
// `bodySHA256`, the URL alone, once that hash matches the body); if that
// does not match, the same message with the URL's default port added or
// removed.
func (v *urlHMAC) checkTwilio(msg *[]byte, r *http.Request, body []byte, sigs *sigSet) error {
	keys, ok := v.twilioKeys(r.Header)
	if !ok {
		return ErrInvalid
	}
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
	if keys.match(*msg, nil, sigs) {
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
	return keys.check(*other, nil, sigs)
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
