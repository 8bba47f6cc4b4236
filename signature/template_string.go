package signature

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The language of a template's string to sign is described in the
// package documentation (Templates).

// maxTemplateParts bounds the parts of a template.
const maxTemplateParts = 256

// partKind is what a part of a template stands for.
type partKind uint8

const (
	partText partKind = iota
	partBody
	partMethod
	partURL
	partCRC32
	partSHA256
	partTimestamp
	partHeader
	partQuery
	partJSON
)

// part is a piece of a template: text, or a field.
type part struct {
	kind  partKind
	text  string // the text; a header's canonical name; a query parameter's name
	leaf  int    // a JSON field's span
	group int    // the optional part it is in, -1 for none
}

// stringTemplate is a parsed template string.
type stringTemplate struct {
	parts     []part
	groups    []partRange // the optional parts, in order
	url       bool        // {url} is used
	timestamp bool        // {timestamp} is used
}

// partRange is parts[from:to].
type partRange struct{ from, to int }

// parseTemplate parses a template string; JSON fields are added to paths.
func parseTemplate(s string, paths *jsonPaths) (*stringTemplate, error) {
	t := &stringTemplate{}
	var text strings.Builder
	group := -1
	flush := func() {
		if text.Len() > 0 {
			t.parts = append(t.parts, part{kind: partText, text: text.String(), group: group})
			text.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) {
				return nil, errors.New("the string ends with a backslash")
			}
			i++
			e, ok := templateEscape(s[i])
			if !ok {
				return nil, fmt.Errorf("unknown escape \\%c at offset %d (known: \\n \\r \\t \\\\ \\{ \\} \\[ \\])", s[i], i-1)
			}
			text.WriteByte(e)
		case '{':
			end := fieldEnd(s, i+1)
			if end < 0 {
				return nil, fmt.Errorf("field at offset %d has no closing }", i)
			}
			flush()
			p, err := parseField(s[i+1:end], paths)
			if err != nil {
				return nil, err
			}
			p.group = group
			t.url = t.url || p.kind == partURL
			t.timestamp = t.timestamp || p.kind == partTimestamp
			t.parts = append(t.parts, p)
			i = end
		case '[':
			if group >= 0 {
				return nil, fmt.Errorf("optional part at offset %d is inside another: they do not nest", i)
			}
			flush()
			group = len(t.groups)
			t.groups = append(t.groups, partRange{from: len(t.parts)})
		case ']':
			if group < 0 {
				return nil, fmt.Errorf("] at offset %d closes no optional part (write \\] for the character)", i)
			}
			flush()
			g := &t.groups[group]
			g.to = len(t.parts)
			if !t.hasField(*g) {
				return nil, fmt.Errorf("optional part ending at offset %d has no field: nothing could leave it out", i)
			}
			group = -1
		case '}':
			return nil, fmt.Errorf("} at offset %d closes no field (write \\} for the character)", i)
		default:
			text.WriteByte(c)
		}
		if len(t.parts) > maxTemplateParts {
			return nil, fmt.Errorf("more than %d parts", maxTemplateParts)
		}
	}
	if group >= 0 {
		return nil, errors.New("an optional part has no closing ]")
	}
	flush()
	if len(t.parts) == 0 {
		return nil, errors.New("empty string")
	}
	return t, nil
}

// hasField reports whether the range holds a field that can be absent.
func (t *stringTemplate) hasField(g partRange) bool {
	for _, p := range t.parts[g.from:g.to] {
		switch p.kind {
		case partHeader, partQuery, partJSON:
			return true
		}
	}
	return false
}

// templateEscape is the character an escape stands for.
func templateEscape(c byte) (byte, bool) {
	switch c {
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case '\\', '{', '}', '[', ']':
		return c, true
	}
	return 0, false
}

// fieldEnd returns the index of the } that closes the field starting at
// i, skipping backslash escapes (a JSON path may escape a } or a dot), or
// -1.
func fieldEnd(s string, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '}':
			return i
		case '{':
			return -1
		}
	}
	return -1
}

// parseField parses the name of a field, between its braces.
func parseField(name string, paths *jsonPaths) (part, error) {
	switch name {
	case "body":
		return part{kind: partBody}, nil
	case "method":
		return part{kind: partMethod}, nil
	case "url":
		return part{kind: partURL}, nil
	case "body.crc32":
		return part{kind: partCRC32}, nil
	case "body.sha256":
		return part{kind: partSHA256}, nil
	case "timestamp":
		return part{kind: partTimestamp}, nil
	}
	kind, arg, _ := strings.Cut(name, ".")
	if arg == "" && (kind == "header" || kind == "query" || kind == "json") {
		return part{}, fmt.Errorf("field {%s} names no %s", name, kind)
	}
	switch kind {
	case "header":
		if strings.ContainsAny(arg, "\\ \t") {
			return part{}, fmt.Errorf("field {%s}: %q is not a header name", name, arg)
		}
		return part{kind: partHeader, text: http.CanonicalHeaderKey(arg)}, nil
	case "query":
		return part{kind: partQuery, text: unescapeName(arg)}, nil
	case "json":
		leaf, err := paths.add(arg)
		if err != nil {
			return part{}, fmt.Errorf("field {%s}: %v", name, err)
		}
		return part{kind: partJSON, leaf: leaf}, nil
	}
	return part{}, fmt.Errorf("unknown field {%s} (known: {body} {method} {url} {body.crc32} {body.sha256} {timestamp} {header.<Name>} {query.<name>} {json.<path>})", name)
}

// unescapeName removes the backslash escapes of a query parameter's name.
func unescapeName(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
