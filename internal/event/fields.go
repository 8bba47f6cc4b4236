package event

import (
	"encoding/binary"
	"errors"
)

// The encoding of a stored event's fields in a file: each field's name
// and value, each a uvarint length then its bytes. A Redis stream entry
// holds the same names and values.

// EncodeFields writes a field map, as ReadFields returns it, with some
// fields set (name, value pairs) in it; the fields go in the map's order,
// which no reader depends on.
func EncodeFields(f map[string]string, set ...string) []byte {
	for i := 0; i+1 < len(set); i += 2 {
		f[set[i]] = set[i+1]
	}
	var b []byte
	for name, v := range f {
		b = AppendField(b, name, []byte(v))
	}
	return b
}

// AppendField appends one field to b.
func AppendField(b []byte, name string, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// AppendFields appends fields given as name, value pairs, each value a
// string or a []byte, to b.
func AppendFields(b []byte, pairs []any) []byte {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, _ := pairs[i].(string)
		switch v := pairs[i+1].(type) {
		case string:
			b = AppendField(b, name, []byte(v))
		case []byte:
			b = AppendField(b, name, v)
		}
	}
	return b
}

// ErrCorruptFields is the error of fields that do not decode.
var ErrCorruptFields = errors.New("corrupt stored event")

// ReadFields decodes the fields AppendField wrote into a map of name to
// value (the values are copies).
func ReadFields(b []byte) (map[string]string, error) { return ReadFieldsExcept(b, "") }

// ReadFieldsExcept is ReadFields leaving out the field named skip ("" for
// none), whose value it neither copies nor reads.
func ReadFieldsExcept(b []byte, skip string) (map[string]string, error) {
	out := make(map[string]string, 16)
	for len(b) > 0 {
		var parts [2][]byte
		for i := range parts {
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return nil, ErrCorruptFields
			}
			parts[i] = b[n : n+int(l)]
			b = b[n+int(l):]
		}
		if skip != "" && string(parts[0]) == skip {
			continue
		}
		out[string(parts[0])] = string(parts[1])
	}
	return out, nil
}
