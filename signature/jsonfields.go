package signature

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON fields a template reads (`{json.<path>}`, and `json:` sources
// of a signature, a timestamp, a certificate URL or an algorithm). Every
// object on a path is read to its end in one pass, and a member the paths
// name that is given twice, or in another case, makes the delivery
// ErrAmbiguous (the package documentation says why). Values off the paths
// are skipped, not parsed. A path's syntax is that of the module's
// `json:` key sources: member names separated by dots, `\` making the next
// character literal (`a\.b` is the member "a.b"); a segment of digits
// also indexes an array.

// maxPathKids bounds the members a template reads from one object (a bit
// each in a word, while the object is read).
const maxPathKids = 64

// jsonNode is a step of the paths a template reads: the members (or
// array elements) it reads in the value there.
type jsonNode struct {
	name string // member name
	idx  int    // the array index name reads as, -1 when none
	leaf int    // index of the value in the spans, -1 when no path ends here
	kids []*jsonNode
}

// jsonPaths is the set of paths of one template, as a tree.
type jsonPaths struct {
	root   jsonNode
	leaves int
}

// newJSONPaths returns an empty set of paths.
func newJSONPaths() *jsonPaths {
	return &jsonPaths{root: jsonNode{idx: -1, leaf: -1}}
}

// splitJSONPath splits a path into its member names, `\` escapes
// removed.
func splitJSONPath(path string) ([]string, error) {
	if path == "" {
		return nil, errors.New("empty JSON path")
	}
	var segs []string
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '\\':
			if i+1 == len(path) {
				return nil, fmt.Errorf("JSON path %q ends with a backslash", path)
			}
			i++
			b.WriteByte(path[i])
		case '.':
			if b.Len() == 0 {
				return nil, fmt.Errorf("JSON path %q has an empty member name", path)
			}
			segs = append(segs, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return nil, fmt.Errorf("JSON path %q has an empty member name", path)
	}
	return append(segs, b.String()), nil
}

// add adds a path and returns the index of its value in the spans; a path
// given before keeps its index.
func (p *jsonPaths) add(path string) (int, error) {
	segs, err := splitJSONPath(path)
	if err != nil {
		return 0, err
	}
	n := &p.root
	for _, seg := range segs {
		var next *jsonNode
		for _, k := range n.kids {
			if k.name == seg {
				next = k
				break
			}
		}
		if next == nil {
			if len(n.kids) == maxPathKids {
				return 0, fmt.Errorf("more than %d JSON members read from one object", maxPathKids)
			}
			idx, ok := arrayIndex(seg)
			if !ok {
				idx = -1
			}
			next = &jsonNode{name: seg, idx: idx, leaf: -1}
			n.kids = append(n.kids, next)
		}
		n = next
	}
	if n.leaf < 0 {
		n.leaf = p.leaves
		p.leaves++
	}
	return n.leaf, nil
}

// arrayIndex reads a segment as an array index: decimal digits only.
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

// jsonSpan is where a value is in the body; start < 0 when the value is
// absent or null.
type jsonSpan struct{ start, end int }

// absentSpan is the span of a value that is not there.
var absentSpan = jsonSpan{start: -1, end: -1}

// utf8BOM is the byte order mark a body may start with.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// readJSON reads the values of the paths p from the JSON document body
// into spans (len p.leaves). Anything but white space after the document
// is ErrInvalid, as is a body that is not JSON where the paths go.
func (p *jsonPaths) readJSON(body []byte, spans []jsonSpan) error {
	sc := jsonScanner{b: body}
	if bytes.HasPrefix(body, utf8BOM) {
		sc.i = len(utf8BOM)
	}
	if err := p.readAt(&sc, spans); err != nil {
		return err
	}
	sc.space()
	if sc.i != len(sc.b) {
		return ErrInvalid
	}
	return nil
}

// readAt reads the value at the scanner's position (white space first)
// for the paths p, leaving the scanner after it.
func (p *jsonPaths) readAt(sc *jsonScanner, spans []jsonSpan) error {
	for i := range spans {
		spans[i] = absentSpan
	}
	sc.space()
	start := sc.i
	if err := sc.value(&p.root, spans); err != nil {
		return err
	}
	if p.root.leaf >= 0 {
		return sc.record(p.root.leaf, start, spans)
	}
	return nil
}

// jsonScanner reads JSON forward from i.
type jsonScanner struct {
	b []byte
	i int
}

// value reads the value at i, and in it the members n reads.
func (sc *jsonScanner) value(n *jsonNode, spans []jsonSpan) error {
	if sc.i >= len(sc.b) {
		return ErrInvalid
	}
	if len(n.kids) > 0 {
		switch sc.b[sc.i] {
		case '{':
			return sc.object(n, spans)
		case '[':
			return sc.array(n, spans)
		}
	}
	return sc.skipValue()
}

// object reads the object at i to its end, and the members n reads in it.
func (sc *jsonScanner) object(n *jsonNode, spans []jsonSpan) error {
	var seen uint64
	var keyBuf [64]byte
	sc.i++ // {
	sc.space()
	if sc.i < len(sc.b) && sc.b[sc.i] == '}' {
		sc.i++
		return nil
	}
	for {
		if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
			return ErrInvalid
		}
		keyStart := sc.i
		escaped, ok := sc.skipString()
		if !ok {
			return ErrInvalid
		}
		key := sc.b[keyStart+1 : sc.i-1]
		if escaped {
			if key, ok = appendJSONString(keyBuf[:0], sc.b[keyStart:sc.i]); !ok {
				return ErrInvalid
			}
		}
		sc.space()
		if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
			return ErrInvalid
		}
		sc.i++
		sc.space()
		k, err := n.member(key)
		if err != nil {
			return err
		}
		if k < 0 {
			if err := sc.skipValue(); err != nil {
				return err
			}
		} else {
			if seen&(1<<k) != 0 {
				return ErrAmbiguous
			}
			seen |= 1 << k
			if err := sc.kid(n.kids[k], spans); err != nil {
				return err
			}
		}
		if done, err := sc.next('}'); err != nil || done {
			return err
		}
	}
}

// member returns the index of the kid of n that key names, -1 for none;
// a key that names one in another case only is ErrAmbiguous.
func (n *jsonNode) member(key []byte) (int, error) {
	for k, kid := range n.kids {
		if kid.name == string(key) {
			return k, nil
		}
	}
	for _, kid := range n.kids {
		if strings.EqualFold(kid.name, bytesView(key)) {
			return -1, ErrAmbiguous
		}
	}
	return -1, nil
}

// array reads the array at i to its end, and the elements n reads in it.
func (sc *jsonScanner) array(n *jsonNode, spans []jsonSpan) error {
	sc.i++ // [
	sc.space()
	if sc.i < len(sc.b) && sc.b[sc.i] == ']' {
		sc.i++
		return nil
	}
	for idx := 0; ; idx++ {
		var kid *jsonNode
		for _, k := range n.kids {
			if k.idx == idx {
				kid = k
				break
			}
		}
		var err error
		if kid != nil {
			err = sc.kid(kid, spans)
		} else {
			err = sc.skipValue()
		}
		if err != nil {
			return err
		}
		if done, err := sc.next(']'); err != nil || done {
			return err
		}
	}
}

// kid reads the value at i for the node kid, recording its span when a
// path ends there.
func (sc *jsonScanner) kid(kid *jsonNode, spans []jsonSpan) error {
	start := sc.i
	if err := sc.value(kid, spans); err != nil {
		return err
	}
	if kid.leaf >= 0 {
		return sc.record(kid.leaf, start, spans)
	}
	return nil
}

// record keeps the span of the value from start to i: a scalar must be
// a JSON literal or number; null is kept as absent.
func (sc *jsonScanner) record(leaf, start int, spans []jsonSpan) error {
	v := sc.b[start:sc.i]
	if len(v) == 0 {
		return ErrInvalid
	}
	switch v[0] {
	case '"', '{', '[':
	case 'n':
		if string(v) != "null" {
			return ErrInvalid
		}
		spans[leaf] = absentSpan
		return nil
	case 't', 'f':
		if string(v) != "true" && string(v) != "false" {
			return ErrInvalid
		}
	default:
		if !validNumber(v) {
			return ErrInvalid
		}
	}
	spans[leaf] = jsonSpan{start: start, end: sc.i}
	return nil
}

// next reads what follows a member or element: ',' (another follows) or
// closing (the container is done).
func (sc *jsonScanner) next(closing byte) (done bool, err error) {
	sc.space()
	if sc.i >= len(sc.b) {
		return false, ErrInvalid
	}
	switch sc.b[sc.i] {
	case ',':
		sc.i++
		sc.space()
		return false, nil
	case closing:
		sc.i++
		return true, nil
	}
	return false, ErrInvalid
}

// space skips JSON white space.
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

// skipValue skips the value at i: a string, an object or an array
// (strings in it skipped as strings), or a literal up to the next
// delimiter. Values off the paths are not checked further.
func (sc *jsonScanner) skipValue() error {
	b, i := sc.b, sc.i
	if i >= len(b) {
		return ErrInvalid
	}
	switch b[i] {
	case '"':
		if _, ok := sc.skipString(); !ok {
			return ErrInvalid
		}
		return nil
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				sc.i = i
				if _, ok := sc.skipString(); !ok {
					return ErrInvalid
				}
				i = sc.i - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					sc.i = i + 1
					return nil
				}
			}
		}
		sc.i = len(b)
		return ErrInvalid
	case ',', '}', ']', ':':
		return ErrInvalid
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			sc.i = i
			return nil
		}
	}
	sc.i = i
	return nil
}

// validNumber reports whether v is a JSON number.
func validNumber(v []byte) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && v[i] >= '1' && v[i] <= '9':
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(v) && v[i] == '.' {
		i++
		if i == len(v) || v[i] < '0' || v[i] > '9' {
			return false
		}
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if i == len(v) || v[i] < '0' || v[i] > '9' {
			return false
		}
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
	}
	return i == len(v)
}

// appendJSONString appends the decoded content of the JSON string lit
// (with its quotes) to dst: escapes decoded, `\u` surrogate pairs joined,
// and a lone surrogate written as U+FFFD as Go's encoding/json does. A
// control character or an unknown escape makes it false.
func appendJSONString(dst, lit []byte) ([]byte, bool) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return dst, false
	}
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x20 {
			return dst, false
		}
		if c != '\\' {
			// copy the run up to the next escape at once
			j := i + 1
			for j < len(s) && s[j] != '\\' && s[j] >= 0x20 {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		if i+1 >= len(s) {
			return dst, false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return dst, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2, _ = hex4(s[i+2:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					i += 6
					r = dec
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		if !validHex(c) {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	return r, true
}
