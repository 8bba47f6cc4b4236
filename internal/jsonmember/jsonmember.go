// Package jsonmember reads the JSON a `json:` key is read from
// (docs/caddyfile.md: Members given twice).
package jsonmember

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// JSON lets an object give a member twice and readers disagree on
// which counts (gjson takes the first; Go's encoding/json, JavaScript and
// Python the last), so a key path is read in one pass over the objects on
// the path, each scanned to its end for a second member of the name taken.

// Get returns the value at a plain path (names and array indexes
// separated by dots, as a key source checks it), as
// gjson.Get does on valid JSON: names match object members, numbers also
// index arrays. When an object on the path gives the member it takes
// more than once (names compared without regard to case, as Go's
// encoding/json matches them), ambiguous is that member's name and res is
// empty. The body is read once, up to the end of the outermost object on
// the path; values off the path are skipped, not parsed. res may be a view
// of body. A body that is not JSON yields nothing.
func Get(body []byte, path string) (res gjson.Result, ambiguous string) {
	sc := jsonScanner{b: body}
	sc.space()
	if bytes.HasPrefix(sc.b[sc.i:], utf8BOM) {
		sc.i += len(utf8BOM)
		sc.space()
	}
	start, end, ambiguous := sc.member(path)
	if ambiguous != "" || start < 0 || sc.bad {
		return gjson.Result{}, ambiguous
	}
	return gjson.Parse(bytesView(body[start:end])), ""
}

// utf8BOM is the byte order mark a body may start with.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// jsonScanner reads JSON forward from i.
type jsonScanner struct {
	b   []byte
	i   int
	bad bool // what was read is not JSON
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
	if !sc.skipValue() {
		return sc.fail()
	}
	return -1, -1, ""
}

// objectMember reads the object at i to its end for the member seg (and
// rest of the path in it).
func (sc *jsonScanner) objectMember(seg, rest string) (start, end int, ambiguous string) {
	start, end = -1, -1
	matches := 0
	sc.i++ // {
	sc.space()
	if sc.i < len(sc.b) && sc.b[sc.i] == '}' {
		sc.i++
		return start, end, ""
	}
	for {
		if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
			return sc.fail()
		}
		keyStart := sc.i + 1
		escaped, ok := sc.skipString()
		if !ok {
			return sc.fail()
		}
		key := bytesView(sc.b[keyStart : sc.i-1])
		if escaped {
			key = gjson.Parse(bytesView(sc.b[keyStart-1 : sc.i])).Str
		}
		sc.space()
		if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
			return sc.fail()
		}
		sc.i++
		sc.space()
		if !strings.EqualFold(key, seg) {
			if !sc.skipValue() {
				return sc.fail()
			}
		} else {
			matches++
			switch {
			case matches > 1:
				return -1, -1, seg
			case key != seg:
				// a name in another case: counted, not taken
				if !sc.skipValue() {
					return sc.fail()
				}
			case rest != "":
				var amb string
				if start, end, amb = sc.member(rest); amb != "" || sc.bad {
					return -1, -1, amb
				}
			default:
				start = sc.i
				if !sc.skipValue() {
					return sc.fail()
				}
				end = sc.i
			}
		}
		if done, ok := sc.next('}'); !ok {
			return sc.fail()
		} else if done {
			return start, end, ""
		}
	}
}

// arrayMember reads the array at i to its end for the element seg, an
// index (and rest of the path in it).
func (sc *jsonScanner) arrayMember(seg, rest string) (start, end int, ambiguous string) {
	start, end = -1, -1
	want, isIndex := arrayIndex(seg)
	sc.i++ // [
	sc.space()
	if sc.i < len(sc.b) && sc.b[sc.i] == ']' {
		sc.i++
		return start, end, ""
	}
	for n := 0; ; n++ {
		switch {
		case !isIndex || n != want:
			if !sc.skipValue() {
				return sc.fail()
			}
		case rest != "":
			var amb string
			if start, end, amb = sc.member(rest); amb != "" || sc.bad {
				return -1, -1, amb
			}
		default:
			start = sc.i
			if !sc.skipValue() {
				return sc.fail()
			}
			end = sc.i
		}
		if done, ok := sc.next(']'); !ok {
			return sc.fail()
		} else if done {
			return start, end, ""
		}
	}
}

// next reads what follows a member or element: a ',' (another follows) or
// closing (the container is done). Anything else is not JSON.
func (sc *jsonScanner) next(closing byte) (done, ok bool) {
	sc.space()
	if sc.i >= len(sc.b) {
		return false, false
	}
	switch sc.b[sc.i] {
	case ',':
		sc.i++
		sc.space()
		return false, true
	case closing:
		sc.i++
		return true, true
	}
	return false, false
}

// fail marks the body as not JSON: nothing is read from it.
func (sc *jsonScanner) fail() (start, end int, ambiguous string) {
	sc.bad = true
	sc.i = len(sc.b)
	return -1, -1, ""
}

// space skips white space (and, leniently, any other control byte).
func (sc *jsonScanner) space() {
	i := sc.i
	for i < len(sc.b) && sc.b[i] <= ' ' {
		i++
	}
	sc.i = i
}

// skipString skips the string at i (its opening quote) and reports
// whether it has escapes; ok is false when it does not end.
func (sc *jsonScanner) skipString() (escaped, ok bool) {
	b := sc.b
	for i := sc.i + 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			sc.i = i + 1
			return escaped, true
		}
	}
	sc.i = len(b)
	return escaped, false
}

// skipValue skips the value at i: a string, an object or array (strings
// in it skipped as strings), or a literal up to the next delimiter. It
// reports false at a string that does not end.
func (sc *jsonScanner) skipValue() bool {
	b, i := sc.b, sc.i
	if i >= len(b) {
		return true
	}
	switch b[i] {
	case '"':
		if i = stringEnd(b, i); i < 0 {
			sc.i = len(b)
			return false
		}
		sc.i = i + 1
		return true
	case '{', '[':
		// one byte at a time, i kept local: values off the path are
		// most of what a key path reads
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				if i = stringEnd(b, i); i < 0 {
					sc.i = len(b)
					return false
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					sc.i = i + 1
					return true
				}
			}
		}
		sc.i = i
		return true
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			sc.i = i
			return true
		}
	}
	sc.i = i
	return true
}

// stringEnd returns the index of the quote that ends the string whose
// opening quote is at i, -1 when none does.
func stringEnd(b []byte, i int) int {
	for i++; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		q := i + j
		// escaped by an odd number of backslashes, it ends nothing
		k := q
		for b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q
		}
		i = q + 1
	}
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
