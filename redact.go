package webhookidempotency

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Redaction (docs/archive.md#redaction): header values and JSON values that
// are replaced by "[redacted]" before an event is stored, so that what is
// redacted is never stored.

// redactedValue replaces every redacted header value and JSON value (as a
// JSON string in a body).
const redactedValue = "[redacted]"

// redactedJSON is redactedValue as a JSON string.
const redactedJSON = `"` + redactedValue + `"`

// secretHeaders carry a credential itself rather than a signature over the
// body: they are redacted whatever the configuration says. The handler adds
// the header of a token scheme (`verify token`, `evolution`, `stone`).
var secretHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"X-Gitlab-Token", "Asaas-Access-Token",
}

// redactor redacts the headers and JSON paths of one route. The zero value
// and a nil *redactor redact nothing.
type redactor struct {
	headers map[string]bool // canonical names
	paths   [][]string      // JSON paths, split into segments
}

// newRedactor builds a redactor from `redact` rules (`header:<name>` or
// `json:<path>`, checked by parseRedactRule) and more header names to
// redact.
func newRedactor(rules []string, headers ...string) (*redactor, error) {
	rd := &redactor{headers: make(map[string]bool)}
	for _, h := range headers {
		rd.headers[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, rule := range rules {
		header, path, err := parseRedactRule(rule)
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

// parseRedactRule parses one `redact` entry: `header:<name>`, returning the
// canonical header name, or `json:<path>`, returning the path's segments.
// A path is names and array indexes separated by dots (`\` escapes a
// character), where a segment `#` stands for every element of an array and
// `*` for every member of an object: `card.number`, `items.#.card`.
func parseRedactRule(rule string) (header string, path []string, err error) {
	kind, arg, ok := strings.Cut(rule, ":")
	if !ok || arg == "" {
		return "", nil, fmt.Errorf("invalid redact '%s': want header:<name> or json:<path>", rule)
	}
	switch kind {
	case "header":
		if !validHeaderName(arg) {
			return "", nil, fmt.Errorf("invalid redact '%s': '%s' is not a valid header name", rule, arg)
		}
		return textproto.CanonicalMIMEHeaderKey(arg), nil, nil
	case "json":
		path, err := splitRedactPath(arg)
		if err != nil {
			return "", nil, fmt.Errorf("invalid redact '%s': %v", rule, err)
		}
		return "", path, nil
	}
	return "", nil, fmt.Errorf("invalid redact '%s': unknown kind '%s' (want header or json)", rule, kind)
}

// splitRedactPath splits a redact path into its segments, unescaped.
func splitRedactPath(p string) ([]string, error) {
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

// redactsHeader reports whether a header's values are redacted.
func (rd *redactor) redactsHeader(name string) bool {
	if rd == nil {
		return false
	}
	if rd.headers[name] {
		return true
	}
	return rd.headers[textproto.CanonicalMIMEHeaderKey(name)]
}

// header returns a copy of h with the values of every redacted header
// replaced by "[redacted]".
func (rd *redactor) header(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for name, values := range h {
		if rd.redactsHeader(name) {
			redacted := make([]string, len(values))
			for i := range redacted {
				redacted[i] = redactedValue
			}
			values = redacted
		} else {
			values = slices.Clone(values)
		}
		out[name] = values
	}
	return out
}

// hasPaths reports whether the redactor changes JSON bodies.
func (rd *redactor) hasPaths() bool { return rd != nil && len(rd.paths) > 0 }

// body returns b with the value at every redacted JSON path replaced by
// "[redacted]", and whether anything was replaced; b itself is never
// modified. Every occurrence counts, including a key repeated in one
// object, so no copy of a redacted value is left behind. ok is false when
// the body could not be redacted with certainty: the caller must then
// store none of it.
func (rd *redactor) body(b []byte) (out []byte, changed, ok bool) {
	if !rd.hasPaths() || !gjson.ValidBytes(b) {
		// a body that is not JSON has no JSON path to redact
		return b, false, true
	}
	var spans [][2]int
	root := gjson.ParseBytes(b)
	start := len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
	for _, path := range rd.paths {
		spans = jsonSpans(b, root, start, path, spans)
	}
	if len(spans) == 0 {
		return b, false, true
	}
	slices.SortFunc(spans, func(x, y [2]int) int { return x[0] - y[0] })
	out = make([]byte, 0, len(b))
	last := 0
	for _, s := range spans {
		if s[0] < last {
			continue // inside a value already redacted
		}
		if s[0] < 0 {
			return nil, false, false
		}
		out = append(out, b[last:s[0]]...)
		out = append(out, redactedJSON...)
		last = s[1]
	}
	out = append(out, b[last:]...)
	return out, true, true
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
