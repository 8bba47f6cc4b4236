package ipset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// Parse reads an address list in one of the forms providers publish:
//
//   - text: one address or CIDR range a line; blank lines and `#`
//     comments are skipped;
//   - JSON: an array of addresses and ranges, or an object. With a field
//     (a dotted path such as `hooks` or `data.ipv4_cidrs`) the array at
//     that path is the list; without one, every array of strings in the
//     object, at any depth, is part of it (a list by region).
//
// Anything that is not an address or range, a field that is absent or
// not an array of strings, or a list with no range at all is an error: a
// list that does not parse is refused whole, never taken in part.
func Parse(data []byte, field string) ([]netip.Prefix, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && (data[0] == '{' || data[0] == '[') {
		return parseJSON(data, field)
	}
	if field != "" {
		return nil, fmt.Errorf("not JSON: the list is read from its field %q", field)
	}
	return parseText(data)
}

func parseText(data []byte) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for n, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		p, err := ParsePrefix(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n+1, err)
		}
		if out = append(out, p); len(out) > MaxRanges {
			return nil, fmt.Errorf("more than %d ranges", MaxRanges)
		}
	}
	if len(out) == 0 {
		return nil, ErrEmpty
	}
	return out, nil
}

func parseJSON(data []byte, field string) ([]netip.Prefix, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not JSON: data after the document")
	}
	var out []netip.Prefix
	var err error
	if field != "" {
		v := doc
		for _, seg := range strings.Split(field, ".") {
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("no field %q: not an object", field)
			}
			if v, ok = obj[seg]; !ok {
				return nil, fmt.Errorf("no field %q", field)
			}
		}
		list, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("field %q is not an array", field)
		}
		out, err = stringArray(list, field, out)
	} else {
		out, err = walk(doc, "", out)
	}
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrEmpty
	}
	return out, nil
}

// walk collects the ranges of every array of strings under v.
func walk(v any, path string, out []netip.Prefix) ([]netip.Prefix, error) {
	var err error
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if out, err = walk(e, join(path, k), out); err != nil {
				return nil, err
			}
		}
	case []any:
		strs := 0
		for _, e := range v {
			if _, ok := e.(string); ok {
				strs++
			}
		}
		if strs > 0 {
			return stringArray(v, path, out)
		}
		for i, e := range v {
			if out, err = walk(e, join(path, fmt.Sprint(i)), out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// stringArray parses an array whose every element is an address or range.
func stringArray(list []any, path string, out []netip.Prefix) ([]netip.Prefix, error) {
	where := ""
	if path != "" {
		where = " in " + path
	}
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("element %d%s is not a string", i, where)
		}
		p, err := ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("element %d%s: %v", i, where, err)
		}
		if out = append(out, p); len(out) > MaxRanges {
			return nil, fmt.Errorf("more than %d ranges", MaxRanges)
		}
	}
	return out, nil
}

func join(path, seg string) string {
	if path == "" {
		return seg
	}
	return path + "." + seg
}
