// Package batch splits a verified request that holds many events into its
// items, and writes the provider's envelope again holding only some of
// them (docs/caddyfile.md: Batches). A path names the array of items in
// the body: `items` (an array member), `#` (the body is the array), or
// nested arrays with `#` between them (`entry.#.changes`: each entry's
// changes). Items are byte ranges of the body: nothing is decoded or
// re-encoded but the arrays that lose items.
package batch

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// Item is one event of a batch: its bytes in the body, and the array it
// is in.
type Item struct {
	Start, End int // the item's bytes: body[Start:End]
	array      int // index of its array in Split's arrays
}

// Raw returns the item's bytes in body.
func (it Item) Raw(body []byte) []byte { return body[it.Start:it.End] }

// Batch is a body split into its items.
type Batch struct {
	Items  []Item
	arrays [][2]int // each array's bytes, `[` to `]`, in body order
}

// Errors of bodies that are not batches Split takes.
var (
	// ErrNotABatch is the error of a body whose path does not lead to an
	// array.
	ErrNotABatch = errors.New("the body holds no array at the batch's path")
	// ErrTooManyItems is the error of a body with more items than the
	// batch takes.
	ErrTooManyItems = errors.New("too many items in the batch")
)

// ParsePath returns a batch path in the form Split takes, or why it is
// not one: dot-separated members and `#` (every element of an array),
// ending at an array. `[*]` and `[]` after a member, the notation of the
// providers' docs, are `.#` (`entry[*].changes` is `entry.#.changes`);
// `[*]`, `[]` or `#` alone is the body itself.
func ParsePath(path string) (string, error) {
	orig := path
	for _, brackets := range []string{"[*]", "[]"} {
		if strings.HasPrefix(path, brackets) {
			path = "#" + path[len(brackets):]
		}
		path = strings.ReplaceAll(path, brackets, ".#")
	}
	if path == "" {
		return "", errors.New("empty batch path")
	}
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		if seg == "" {
			return "", fmt.Errorf("invalid batch path %q: an empty segment", orig)
		}
		if strings.ContainsAny(seg, "*?|@!=<>%[]{}\\") || (seg != "#" && strings.Contains(seg, "#")) {
			return "", fmt.Errorf("invalid batch path %q: segment %q: want member names, and # for every element of an array", orig, seg)
		}
		if seg == "#" && i > 0 && segs[i-1] == "#" {
			return "", fmt.Errorf("invalid batch path %q: # must follow a member", orig)
		}
	}
	if segs[len(segs)-1] == "#" && len(segs) > 1 {
		// `value.#` is `value`: the path ends at the array
		path = strings.Join(segs[:len(segs)-1], ".")
	}
	return path, nil
}

// Split returns the items of body at path (one ParsePath returned), in
// body order; at most max items (more is ErrTooManyItems).
func Split(body []byte, path string, max int) (*Batch, error) {
	b := &Batch{}
	segs := strings.Split(path, ".")
	if segs[0] == "#" {
		// the body is the array
		segs = segs[1:]
		root := gjson.ParseBytes(body)
		if !root.IsArray() {
			return nil, ErrNotABatch
		}
		// gjson's Raw of a document keeps the white space after the
		// value: the array ends at its ']', what follows is the envelope's
		root.Index = len(body) - len(strings.TrimLeft(string(body), " \t\r\n"))
		root.Raw = strings.TrimRight(root.Raw, " \t\r\n")
		if err := b.walkArray(body, 0, root, segs, max); err != nil {
			return nil, err
		}
		return b, nil
	}
	if err := b.walk(body, 0, segs, max); err != nil {
		return nil, err
	}
	if len(b.arrays) == 0 {
		return nil, ErrNotABatch
	}
	return b, nil
}

// walk follows segs from the JSON value at body[base:], collecting the
// items of the arrays the path ends at.
func (b *Batch) walk(body []byte, base int, segs []string, max int) error {
	// the members up to the next # (or the end), read as one gjson path
	i := 0
	for i < len(segs) && segs[i] != "#" {
		i++
	}
	if i == 0 {
		return fmt.Errorf("invalid batch path: # must follow a member")
	}
	res := gjson.GetBytes(body[base:], strings.Join(segs[:i], "."))
	if !res.Exists() {
		return nil // this element has no such member: no items
	}
	if !res.IsArray() || res.Index == 0 {
		// (a member's value is never at offset 0 of its document)
		return ErrNotABatch
	}
	if i < len(segs) {
		// `#`: every element, then the rest of the path in each
		return b.walkArray(body, base, res, segs[i+1:], max)
	}
	return b.walkArray(body, base, res, nil, max)
}

// walkArray collects an array's elements as items (rest empty), or walks
// rest from each element. arr was read from body[base:], and its Index
// and its elements' are offsets in that document.
func (b *Batch) walkArray(body []byte, base int, arr gjson.Result, rest []string, max int) error {
	start := base + arr.Index
	if !arr.IsArray() || start+len(arr.Raw) > len(body) || string(body[start:start+len(arr.Raw)]) != arr.Raw {
		return ErrNotABatch
	}
	var err error
	idx := len(b.arrays)
	if len(rest) == 0 {
		b.arrays = append(b.arrays, [2]int{start, start + len(arr.Raw)})
	}
	arr.ForEach(func(_, el gjson.Result) bool {
		at := base + el.Index
		if len(rest) == 0 {
			if len(b.Items) == max {
				err = fmt.Errorf("%w: more than %d", ErrTooManyItems, max)
				return false
			}
			b.Items = append(b.Items, Item{Start: at, End: at + len(el.Raw), array: idx})
			return true
		}
		if !el.IsObject() {
			return true
		}
		err = b.walk(body, at, rest, max)
		return err == nil
	})
	return err
}

// Envelope returns body with only the items kept (by their index in
// Items) in their arrays, in their order; the bytes outside the arrays
// that lose items are as they were.
func (b *Batch) Envelope(body []byte, keep func(i int) bool) []byte {
	out := make([]byte, 0, len(body))
	last := 0
	next := 0 // the first item of the array being written
	for ai, arr := range b.arrays {
		out = append(out, body[last:arr[0]]...)
		out = append(out, '[')
		first := true
		for ; next < len(b.Items) && b.Items[next].array == ai; next++ {
			if !keep(next) {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, b.Items[next].Raw(body)...)
		}
		out = append(out, ']')
		last = arr[1]
	}
	return append(out, body[last:]...)
}
