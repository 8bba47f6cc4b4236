package webhookidempotency

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// The JSON a `json:` key is read from (docs/caddyfile.md: Members given
// twice). JSON lets an object give a member twice and readers disagree on
// which counts (gjson takes the first; Go's encoding/json, JavaScript and
// Python the last), so a key path is read in one pass over the objects on
// the path, each scanned to its end for a second member of the name taken.

// jsonMember returns the value at a plain path (see checkJSONPath), as
// gjson.Get does on valid JSON: names match object members, numbers also
// index arrays. When an object on the path gives the member it takes
// more than once (names compared without regard to case, as Go's
// encoding/json matches them), ambiguous is that member's name and res is
// empty. The body is read once, up to the end of the outermost object on
// the path; values off the path are skipped, not parsed. res may be a view
// of body. A body that is not JSON yields nothing.
func jsonMember(body []byte, path string) (res gjson.Result, ambiguous string) {
	sc := jsonScanner{b: body}
	sc.space()
	if bytes.HasPrefix(sc.b[sc.i:], utf8BOM) {
		sc.i += len(utf8BOM)
		sc.space()
	}
	start, end, ambiguous := sc.member(path)
	if ambiguous != "" || start < 0 {
		return gjson.Result{}, ambiguous
	}
	return gjson.Parse(bytesView(body[start:end])), ""
}

// utf8BOM is the byte order mark a body may start with.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// jsonScanner reads JSON forward from i.
type jsonScanner struct {
	b []byte
	i int
}

// member reads the container at i (an object or an array) to its end and
// returns the span of the value path names in it, start -1 when there is
// none, or the name of a member on the way given twice.
func (sc *jsonScanner) member(path string) (start, end int, ambiguous string) {
	seg, rest := nextSegment(path)
	if sc.i >= len(sc.b) {
		return -1, -1, ""
	}
	switch sc.b[sc.i] {
	case '{':
		return sc.objectMember(seg, rest)
	case '[':
		return sc.arrayMember(seg, rest)
	}
	sc.skipValue()
	return -1, -1, ""
}

// objectMember reads the object at i to its end for the member seg (and
// rest of the path in it).
func (sc *jsonScanner) objectMember(seg, rest string) (start, end int, ambiguous string) {
	start, end = -1, -1
	matches := 0
	sc.i++ // {
	for {
		sc.space()
		if sc.i >= len(sc.b) || sc.b[sc.i] == '}' {
			sc.i++
			return start, end, ""
		}
		if sc.b[sc.i] != '"' {
			return -1, -1, ""
		}
		keyStart := sc.i + 1
		escaped, ok := sc.skipString()
		if !ok {
			return -1, -1, ""
		}
		key := bytesView(sc.b[keyStart : sc.i-1])
		if escaped {
			key = gjson.Parse(bytesView(sc.b[keyStart-1 : sc.i])).Str
		}
		sc.space()
		if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
			return -1, -1, ""
		}
		sc.i++
		sc.space()
		if !strings.EqualFold(key, seg) {
			if !sc.skipValue() {
				return -1, -1, ""
			}
		} else {
			matches++
			switch {
			case matches > 1:
				return -1, -1, seg
			case key != seg:
				// a name in another case: counted, not taken
				if !sc.skipValue() {
					return -1, -1, ""
				}
			case rest != "":
				var amb string
				if start, end, amb = sc.member(rest); amb != "" {
					return -1, -1, amb
				}
			default:
				start = sc.i
				if !sc.skipValue() {
					return -1, -1, ""
				}
				end = sc.i
			}
		}
		sc.space()
		if sc.i < len(sc.b) && sc.b[sc.i] == ',' {
			sc.i++
		}
	}
}

// arrayMember reads the array at i to its end for the element seg, an
// index (and rest of the path in it).
func (sc *jsonScanner) arrayMember(seg, rest string) (start, end int, ambiguous string) {
	start, end = -1, -1
	want, isIndex := arrayIndex(seg)
	sc.i++ // [
	for n := 0; ; n++ {
		sc.space()
		if sc.i >= len(sc.b) || sc.b[sc.i] == ']' {
			sc.i++
			return start, end, ""
		}
		switch {
		case !isIndex || n != want:
			if !sc.skipValue() {
				return -1, -1, ""
			}
		case rest != "":
			var amb string
			if start, end, amb = sc.member(rest); amb != "" {
				return -1, -1, amb
			}
		default:
			start = sc.i
			if !sc.skipValue() {
				return -1, -1, ""
			}
			end = sc.i
		}
		sc.space()
		if sc.i < len(sc.b) && sc.b[sc.i] == ',' {
			sc.i++
		}
	}
}

// space skips white space.
func (sc *jsonScanner) space() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// skipString skips the string at i (its opening quote) and reports
// whether it has escapes; ok is false when it does not end.
func (sc *jsonScanner) skipString() (escaped, ok bool) {
	i := sc.i + 1
	for {
		j := bytes.IndexByte(sc.b[i:], '"')
		if j < 0 {
			sc.i = len(sc.b)
			return escaped, false
		}
		q := i + j
		if !escaped && bytes.IndexByte(sc.b[i:q], '\\') >= 0 {
			escaped = true
		}
		// the quote ends the string unless an odd number of
		// backslashes escape it
		k := q
		for k > sc.i+1 && sc.b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			sc.i = q + 1
			return escaped, true
		}
		i = q + 1
	}
}

// skipValue skips the value at i: a string, an object or array (strings
// in it skipped as strings), or a literal up to the next delimiter. It
// reports false at a string that does not end.
func (sc *jsonScanner) skipValue() bool {
	if sc.i >= len(sc.b) {
		return true
	}
	switch sc.b[sc.i] {
	case '"':
		_, ok := sc.skipString()
		return ok
	case '{', '[':
		depth := 0
		for sc.i < len(sc.b) {
			switch sc.b[sc.i] {
			case '"':
				if _, ok := sc.skipString(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					sc.i++
					return true
				}
			}
			sc.i++
		}
		return true
	}
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return true
		}
		sc.i++
	}
	return true
}

// nextSegment splits the first segment off a plain path, `\` escapes
// removed; rest is "" after the last one. A segment without escapes is a
// substring of path.
func nextSegment(path string) (seg, rest string) {
	i := strings.IndexAny(path, ".\\")
	if i < 0 {
		return path, ""
	}
	if path[i] == '.' {
		return path[:i], path[i+1:]
	}
	var b strings.Builder
	for j := 0; j < len(path); j++ {
		switch c := path[j]; c {
		case '\\':
			if j+1 < len(path) {
				j++
				b.WriteByte(path[j])
			}
		case '.':
			return b.String(), path[j+1:]
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), ""
}

// arrayIndex reads a segment as an array index, as gjson does: decimal
// digits only.
func arrayIndex(seg string) (int, bool) {
	if seg == "" || len(seg) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return 0, false
		}
		n = n*10 + int(seg[i]-'0')
	}
	return n, true
}

// bytesView is b as a string without a copy; b must not change while the
// string is used (a request's body does not until the request is done).
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
