package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/jsonmember"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// keyKind is the kind of a key source.
type keyKind uint8

const (
	keyHeader keyKind = iota + 1
	keyJSON
	keyQuery
	keyBody
)

// keySource is one parsed entry of the `key` list.
type keySource struct {
	kind keyKind
	arg  string // header name (canonical), JSON path or query parameter

	// unsigned marks a header or query source that the handler's signature
	// does not cover while it covers the body: its key is claimed with the
	// body's (see guard.go).
	unsigned bool
}

// bodySource is the body hash as the key.
var bodySource = keySource{kind: keyBody}

// maxKeyValueLen is the longest key value stored as is; longer values and
// values that are not printable ASCII are stored as their SHA-256.
const maxKeyValueLen = 200

// Prefixes of hashed key values. The body's SHA-256 is `sha256:<hex>`; a
// header, JSON or query value that is hashed is `key-sha256:<hex>`, so no
// value a sender chooses lands on another delivery's body hash (README:
// Keys).
const (
	bodyHashPrefix  = "sha256:"
	valueHashPrefix = "key-sha256:"
)

// parseKeySource parses `header:<Name>`, `json:<path>`, `query:<name>` or
// `body`.
func parseKeySource(s string) (keySource, error) {
	if s == "body" {
		return keySource{kind: keyBody}, nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok || arg == "" {
		return keySource{}, fmt.Errorf("invalid key source %q: want header:<name>, json:<path>, query:<name> or body", s)
	}
	switch kind {
	case "header":
		if !httpguts.ValidHeaderFieldName(arg) {
			return keySource{}, fmt.Errorf("invalid key source %q: %q is not a valid header name", s, arg)
		}
		return keySource{kind: keyHeader, arg: textproto.CanonicalMIMEHeaderKey(arg)}, nil
	case "json":
		if err := checkJSONPath(arg); err != nil {
			return keySource{}, fmt.Errorf("invalid key source %q: %v", s, err)
		}
		return keySource{kind: keyJSON, arg: arg}, nil
	case "query":
		return keySource{kind: keyQuery, arg: arg}, nil
	}
	return keySource{}, fmt.Errorf("invalid key source %q: unknown kind %q (want header, json, query or body)", s, kind)
}

// checkJSONPath accepts a plain path: names and array indexes separated by
// dots, `\` escaping a character. gjson's query syntax (wildcards, `#`
// queries, modifiers, multipaths, literals, JSON Lines) has no use in a key
// and lets a hostile body cost far more CPU than a lookup (`@pretty` over a
// deeply nested body, for one).
func checkJSONPath(p string) error {
	seg := 0 // bytes in the current segment
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			if i+1 == len(p) {
				return fmt.Errorf("path ends with a lone '\\'")
			}
			i++
			seg++
		case c == '.':
			if seg == 0 {
				return fmt.Errorf("path has an empty segment")
			}
			seg = 0
		case strings.IndexByte("*?#|@!{}[]", c) >= 0:
			return fmt.Errorf("path uses gjson query syntax '%c': only names and array indexes separated by dots are supported (write a literal '%c' as '\\%c')", c, c, c)
		default:
			seg++
		}
	}
	if seg == 0 {
		return fmt.Errorf("path has an empty segment")
	}
	return nil
}

// parseKeySources parses a whole `key` list.
func parseKeySources(list []string) ([]keySource, error) {
	out := make([]keySource, 0, len(list))
	for _, s := range list {
		ks, err := parseKeySource(s)
		if err != nil {
			return nil, err
		}
		out = append(out, ks)
	}
	return out, nil
}

// resolveKey returns the key value from the first key source that yields a
// non-empty value, and that source (bodySource for the body hash). The body
// source is `sha256:<hex>` of the body; a value that is too long, not
// printable ASCII or itself starts with a hash prefix becomes
// `key-sha256:<hex>` of the value, except a value that is the body's own
// `sha256:<hex>` (what an inbox or a redelivery sends as Idempotency-Key
// for a body-keyed event), which is the body's key (isBodyKey), though
// from still names the source it came from (a guard or note of an unsigned
// source still applies). A list that yields nothing falls back to the body
// hash, so every request has a key. A JSON
// member on a key path that appears twice in its object is an ambiguous
// delivery: resolveKey returns an *ambiguousError.
func resolveKey(sources []keySource, r *http.Request, body []byte, bodyHash *[32]byte) (value string, from keySource, err error) {
	for _, ks := range sources {
		var v string
		switch ks.kind {
		case keyHeader:
			if vs := r.Header[ks.arg]; len(vs) > 0 {
				v = strings.TrimSpace(vs[0])
			}
		case keyJSON:
			if v, err = jsonKeyValue(body, ks.arg); err != nil {
				return "", ks, err
			}
			if v != "" {
				// v may be a view of the body, whose buffer is reused
				// once the request is done
				if s := sanitizeKeyValue(v, bodyHash); s != v {
					return s, ks, nil
				}
				return strings.Clone(v), ks, nil
			}
		case keyQuery:
			v = query.Value(r.URL.RawQuery, ks.arg)
		case keyBody:
			return hashKey(bodyHash), bodySource, nil
		}
		if v != "" {
			return sanitizeKeyValue(v, bodyHash), ks, nil
		}
	}
	return hashKey(bodyHash), bodySource, nil
}

// jsonKeyValue returns the value of the JSON member at path as a key
// reads it: a string's text, a number's or literal's bytes, an object's
// or array's JSON (unusual as an id, but stable); "" when there is none.
// The value may be a view of body. A member given twice on the path is
// an *ambiguousError.
func jsonKeyValue(body []byte, path string) (string, error) {
	res, ambiguous := jsonmember.Get(body, path)
	if ambiguous != "" {
		return "", &ambiguousError{path: path, member: ambiguous}
	}
	switch res.Type {
	case gjson.String:
		return res.Str, nil
	case gjson.Number, gjson.True, gjson.False, gjson.JSON:
		return res.Raw, nil
	}
	return "", nil
}

// isBodyKey reports whether a resolved key value is the body's hash: no
// other value starts with its prefix (sanitizeKeyValue).
func isBodyKey(value string) bool { return strings.HasPrefix(value, bodyHashPrefix) }

// ambiguousError is a delivery whose key path reads a JSON member that
// appears more than once in its object: the handler would read one value
// and an application another (many parsers keep the last), so the
// delivery is refused (docs/caddyfile.md: Keys).
type ambiguousError struct {
	path   string // the key path
	member string // the member that appears more than once
}

func (e *ambiguousError) Error() string {
	return "ambiguous delivery: the JSON member \"" + e.member + "\" of key json:" + e.path + " appears more than once"
}

// sanitizeKeyValue returns v if it is short printable ASCII that does not
// start with a hash prefix (a body's, a hashed value's or a note's), else
// `key-sha256:<hex>` of v. A value that is this body's own hash,
// `sha256:<hex>`, is returned as the body's key: it names the delivery it
// comes with, no other (docs/inbox.md: Delivery).
func sanitizeKeyValue(v string, bodyHash *[32]byte) string {
	if strings.HasPrefix(v, bodyHashPrefix) && isBodyHash(v, bodyHash) {
		return hashKey(bodyHash)
	}
	if len(v) > maxKeyValueLen || strings.HasPrefix(v, bodyHashPrefix) || strings.HasPrefix(v, valueHashPrefix) || strings.HasPrefix(v, notePrefix) {
		return hashValue(v)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return hashValue(v)
		}
	}
	return v
}

// isBodyHash reports whether v is `sha256:<hex>` of the body, hex in
// lower case as hashKey writes it.
func isBodyHash(v string, bodyHash *[32]byte) bool {
	if len(v) != len(bodyHashPrefix)+hex.EncodedLen(len(bodyHash)) {
		return false
	}
	var b [len(bodyHashPrefix) + 64]byte
	copy(b[:], bodyHashPrefix)
	hex.Encode(b[len(bodyHashPrefix):], bodyHash[:])
	return string(b[:]) == v
}

// hashValue formats the SHA-256 of a key value as `key-sha256:<hex>`.
func hashValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	var b [len(valueHashPrefix) + 64]byte
	copy(b[:], valueHashPrefix)
	hex.Encode(b[len(valueHashPrefix):], sum[:])
	return string(b[:])
}

// hashKey formats the body's SHA-256 as `sha256:<hex>`.
func hashKey(sum *[32]byte) string {
	var b [len(bodyHashPrefix) + 64]byte
	copy(b[:], bodyHashPrefix)
	hex.Encode(b[len(bodyHashPrefix):], sum[:])
	return string(b[:])
}
