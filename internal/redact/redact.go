// Package redact holds one set of rules for the secrets a stored request
// carries (docs/archive.md#redaction). The archive applies them before it
// stores an event, so what it redacts is never stored; the admin API
// applies them to what it shows of an inbox's events, which the inbox
// stores whole because it must deliver them.
package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpguts"
)

// Value replaces every redacted header value, query parameter
// value and JSON value (as a JSON string in a body).
const Value = "[redacted]"

// valueJSON is Value as a JSON string.
const valueJSON = `"` + Value + `"`

// SecretHeaders carry a credential itself rather than a signature over the
// body: they are redacted whatever the configuration says. The handler adds
// the header of a token scheme, and any header whose name looks like a
// credential's is redacted too (credentialName).
var SecretHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"X-Gitlab-Token", "Asaas-Access-Token",
}

// credentialFragments mark a header or query parameter name as a
// credential's when the name, in lower case without '-', '_' and '.',
// contains one (`saskey`: Azure Event Grid's access key, `aeg-sas-key` in
// a header or the query, https://learn.microsoft.com/azure/event-grid/security-authenticate-publishing-clients);
// credentialNames when it is one, with or without an `x`
// before it (X-Auth, X-Key, X-Pass). Signature headers are not
// credentials (they prove nothing without the secret, and an auditor
// checks an event with them), but a signature or a code in a URL's query
// is that URL's credential: queryFragments and queryNames add them for
// query parameters (`hmac` is the token Efí's Pix webhooks carry in their
// URL without mutual TLS).
var (
	credentialFragments = byteStrings("authorization", "cookie", "token", "secret", "password", "passwd",
		"apikey", "accesskey", "privatekey", "credential", "session", "authkey", "webhookkey", "signingkey",
		"jwt", "bearer", "saskey")
	credentialNames = byteStrings("auth", "key", "pwd", "pass", "otp")
	queryFragments  = byteStrings("signature")
	queryNames      = byteStrings("sig", "code", "hmac")
)

func byteStrings(list ...string) [][]byte {
	out := make([][]byte, len(list))
	for i, s := range list {
		out[i] = []byte(s)
	}
	return out
}

// credentialName reports whether a header name (or, with query, a query
// parameter name) looks like it carries a credential. It does not
// allocate for names of up to 64 bytes.
func credentialName(name string, query bool) bool {
	var buf [64]byte
	n := buf[:0]
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '-' || c == '_' || c == '.':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		n = append(n, c)
	}
	match := func(fragments, names [][]byte) bool {
		for _, f := range fragments {
			if bytes.Contains(n, f) {
				return true
			}
		}
		bare := bytes.TrimPrefix(n, []byte("x"))
		for _, w := range names {
			if bytes.Equal(n, w) || bytes.Equal(bare, w) {
				return true
			}
		}
		return false
	}
	return match(credentialFragments, credentialNames) || (query && match(queryFragments, queryNames))
}

// redactor redacts the headers, query parameters and JSON paths of one
// route. A nil *Redactor redacts nothing.
type Redactor struct {
	headers     map[string]bool // canonical names redacted whatever they look like
	keepHeaders map[string]bool // canonical names never redacted for their name alone
	query       map[string]bool // query parameters redacted whatever they look like
	keepQuery   map[string]bool // query parameters never redacted for their name alone
	paths       [][]string      // JSON paths, split into segments
}

// New builds a redactor from `redact` rules (`header:<name>` or
// `json:<path>`, checked by ParseRule) and more header names to
// redact.
func New(rules []string, headers ...string) (*Redactor, error) {
	rd := &Redactor{headers: make(map[string]bool), keepHeaders: make(map[string]bool), query: make(map[string]bool), keepQuery: make(map[string]bool)}
	for _, h := range headers {
		rd.headers[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, rule := range rules {
		header, path, err := ParseRule(rule)
		if err != nil {
			return nil, err
		}
		if header != "" {
			rd.headers[header] = true
		} else {
			rd.paths = append(rd.paths, path)
		}
	}
	return rd, nil
}

// KeepHeader marks a header that is never redacted for its name alone: a
// header the route takes its key from (the key is stored anyway).
func (rd *Redactor) KeepHeader(name string) {
	rd.keepHeaders[textproto.CanonicalMIMEHeaderKey(name)] = true
}

// KeepQuery marks a query parameter that is never redacted for its name
// alone, as KeepHeader does for a header.
func (rd *Redactor) KeepQuery(name string) { rd.keepQuery[name] = true }

// RedactQuery marks a query parameter that is redacted whatever its name
// looks like: one a route's scheme reads its secret from.
func (rd *Redactor) RedactQuery(name string) { rd.query[name] = true }

// RedactsHeader reports whether a header's values are redacted: it is
// named (SecretHeaders, the route's, a rule), or its name looks like a
// credential's and the route takes no key from it.
func (rd *Redactor) RedactsHeader(name string) bool {
	if rd == nil {
		return false
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name) // no allocation when it already is
	return rd.headers[canonical] || (!rd.keepHeaders[canonical] && credentialName(canonical, false))
}

// header returns a copy of h with the values of every redacted header
// replaced by "[redacted]".
func (rd *Redactor) Header(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		if rd.RedactsHeader(name) {
			redacted := make([]string, len(values))
			for i := range redacted {
				redacted[i] = Value
			}
			values = redacted
		} else {
			values = slices.Clone(values)
		}
		out[name] = values
	}
	return out
}

// Error returns a transport error with the URL it names (a *url.Error's)
// redacted as URI redacts it; any other error as it is.
func (rd *Redactor) Error(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		c := *ue
		c.URL = rd.URI(ue.URL)
		return &c
	}
	return err
}

// uri returns uri with the value of every query parameter marked by
// RedactQuery, or whose name looks like a credential's (and that the route
// takes no key from), replaced by "[redacted]", every other byte as it is.
func (rd *Redactor) URI(uri string) string {
	path, query, ok := strings.Cut(uri, "?")
	if rd == nil || !ok {
		return uri
	}
	query, fragment, hasFragment := strings.Cut(query, "#")
	pairs := strings.Split(query, "&")
	changed := false
	for i, pair := range pairs {
		name, _, hasValue := strings.Cut(pair, "=")
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		if hasValue && (rd.query[name] || (!rd.keepQuery[name] && credentialName(name, true))) {
			pairs[i] = pair[:strings.IndexByte(pair, '=')+1] + Value
			changed = true
		}
	}
	if !changed {
		return uri
	}
	out := path + "?" + strings.Join(pairs, "&")
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// ParseRule parses one `redact` entry: `header:<name>`, returning the
// canonical header name, or `json:<path>`, returning the path's segments.
// A path is names and array indexes separated by dots (`\` escapes a
// character), where a segment `#` stands for every element of an array and
// `*` for every member of an object: `card.number`, `items.#.card`.
func ParseRule(rule string) (header string, path []string, err error) {
	kind, arg, ok := strings.Cut(rule, ":")
	if !ok || arg == "" {
		return "", nil, fmt.Errorf("invalid redact '%s': want header:<name> or json:<path>", rule)
	}
	switch kind {
	case "header":
		if !httpguts.ValidHeaderFieldName(arg) {
			return "", nil, fmt.Errorf("invalid redact '%s': '%s' is not a valid header name", rule, arg)
		}
		return textproto.CanonicalMIMEHeaderKey(arg), nil, nil
	case "json":
		path, err := SplitPath(arg)
		if err != nil {
			return "", nil, fmt.Errorf("invalid redact '%s': %v", rule, err)
		}
		return "", path, nil
	}
	return "", nil, fmt.Errorf("invalid redact '%s': unknown kind '%s' (want header or json)", rule, kind)
}

// SplitPath splits a redact path into its segments, unescaped.
func SplitPath(p string) ([]string, error) {
	var segs []string
	var cur strings.Builder
	escaped := false // the current segment has an escaped character
	end := func() error {
		if cur.Len() == 0 {
			return errors.New("path has an empty segment")
		}
		s := cur.String()
		if !escaped && strings.ContainsAny(s, "#*") && s != "#" && s != "*" {
			return fmt.Errorf("'#' and '*' stand alone as a segment (write a literal one as '\\%c')", s[strings.IndexAny(s, "#*")])
		}
		if escaped && (s == "#" || s == "*") {
			s = "\x00" + s // a literal '#' or '*' key, not the wildcard
		}
		segs = append(segs, s)
		cur.Reset()
		escaped = false
		return nil
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			if i+1 == len(p) {
				return nil, errors.New("path ends with a lone '\\'")
			}
			i++
			cur.WriteByte(p[i])
			escaped = true
		case c == '.':
			if err := end(); err != nil {
				return nil, err
			}
		case strings.IndexByte("?|@!{}[]()=<>%,", c) >= 0:
			return nil, fmt.Errorf("path uses gjson query syntax '%c': only names, array indexes, '#' and '*' separated by dots are supported (write a literal '%c' as '\\%c')", c, c, c)
		default:
			cur.WriteByte(c)
		}
	}
	if err := end(); err != nil {
		return nil, err
	}
	return segs, nil
}

// HasPaths reports whether the redactor changes JSON bodies.
func (rd *Redactor) HasPaths() bool { return rd != nil && len(rd.paths) > 0 }

// Why a body cannot be redacted with certainty (Body).
var (
	// ErrNotStrictJSON: the route redacts JSON values and the body is not
	// strict JSON (RFC 8259): a byte order mark, a comment, NaN, trailing
	// data, or no JSON at all. A lenient parser in the application may
	// read values there that the rules never saw, so none of it is kept.
	ErrNotStrictJSON = errors.New("the body is not strict JSON (RFC 8259), so the route's json redactions cannot be applied with certainty")
	// ErrUncertain: a redacted value was not where it was found.
	ErrUncertain = errors.New("a redacted JSON value was not where it was found")
)

// Body returns b with the value at every redacted JSON path replaced by
// "[redacted]", and whether anything was replaced; b itself is never
// modified. Every occurrence counts, including a key repeated in one
// object, so no copy of a redacted value is left behind. With JSON paths,
// a body that is not strict JSON, or one the redactor cannot be sure it
// redacted, is an error (ErrNotStrictJSON, ErrUncertain): the caller must
// then store none of it. An empty body has nothing to redact.
func (rd *Redactor) Body(b []byte) (out []byte, changed bool, err error) {
	if !rd.HasPaths() || len(bytes.TrimLeft(b, " \t\r\n")) == 0 {
		return b, false, nil
	}
	if !json.Valid(b) {
		return nil, false, ErrNotStrictJSON
	}
	if !gjson.ValidBytes(b) {
		return nil, false, ErrUncertain
	}
	var spans [][2]int
	root := gjson.ParseBytes(b)
	start := len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
	for _, path := range rd.paths {
		spans = jsonSpans(b, root, start, path, spans)
	}
	if len(spans) == 0 {
		return b, false, nil
	}
	slices.SortFunc(spans, func(x, y [2]int) int { return x[0] - y[0] })
	out = make([]byte, 0, len(b))
	last := 0
	for _, s := range spans {
		if s[0] < last {
			continue // inside a value already redacted
		}
		if s[0] < 0 {
			return nil, false, ErrUncertain
		}
		out = append(out, b[last:s[0]]...)
		out = append(out, valueJSON...)
		last = s[1]
	}
	out = append(out, b[last:]...)
	return out, true, nil
}

// jsonSpans appends the byte spans, in the body b, of the values at path
// under v, whose raw text starts at offset at. A span that does not hold
// the value found there is appended as {-1, -1}.
func jsonSpans(b []byte, v gjson.Result, at int, path []string, spans [][2]int) [][2]int {
	if len(path) == 0 {
		end := at + len(v.Raw)
		if at < 0 || end > len(b) || string(b[at:end]) != v.Raw {
			return append(spans, [2]int{-1, -1})
		}
		return append(spans, [2]int{at, end})
	}
	if !v.IsObject() && !v.IsArray() {
		return spans
	}
	seg := path[0]
	literal := strings.HasPrefix(seg, "\x00")
	if literal {
		seg = seg[1:]
	}
	index, isIndex := -1, false
	if n, err := strconv.Atoi(seg); err == nil && n >= 0 {
		index, isIndex = n, true
	}
	v.ForEach(func(key, child gjson.Result) bool {
		// ForEach sets child.Index to its offset in v.Raw plus v.Index
		childAt := at + child.Index - v.Index
		var match bool
		if v.IsObject() {
			match = key.Str == seg || (seg == "*" && !literal)
		} else {
			match = (seg == "#" && !literal) || (isIndex && int(key.Num) == index)
		}
		if match {
			spans = jsonSpans(b, child, childAt, path[1:], spans)
		}
		return true
	})
	return spans
}
