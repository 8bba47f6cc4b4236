package event

import (
	"cmp"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
)

// ID is a stored event's id, `<ms>-<seq>`, as Redis streams number their
// entries; the other stores number theirs the same way, so ids order
// events by the time they were stored.
type ID struct{ MS, Seq uint64 }

// The smallest and the largest ID.
var (
	MinID = ID{}
	MaxID = ID{math.MaxUint64, math.MaxUint64}
)

// ParseID parses a whole id, `<ms>-<seq>`.
func ParseID(s string) (ID, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return ID{}, false
	}
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	return ID{m, q}, err1 == nil && err2 == nil
}

// ParseStart parses the start of a range of ids as XRANGE takes it
// (https://redis.io/docs/latest/commands/xrange/): a whole id, or a time
// in milliseconds alone, which starts at its first id (`<ms>-0`).
func ParseStart(s string) (ID, bool) {
	if id, ok := ParseID(s); ok {
		return id, true
	}
	ms, err := strconv.ParseUint(s, 10, 64)
	return ID{MS: ms}, err == nil
}

// String writes the id as `<ms>-<seq>`.
func (id ID) String() string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Compare returns -1, 0 or +1 as id comes before, is, or comes after o.
func (id ID) Compare(o ID) int {
	return cmp.Or(cmp.Compare(id.MS, o.MS), cmp.Compare(id.Seq, o.Seq))
}

// CompareIDs orders two ids as written (Redis's, say); one that does not
// parse comes first, as MinID.
func CompareIDs(a, b string) int {
	x, _ := ParseID(a)
	y, _ := ParseID(b)
	return x.Compare(y)
}

// Less reports whether id comes before o.
func (id ID) Less(o ID) bool { return id.Compare(o) < 0 }

// Prev returns the id just before id (id must not be MinID).
func (id ID) Prev() ID {
	if id.Seq > 0 {
		return ID{id.MS, id.Seq - 1}
	}
	return ID{id.MS - 1, math.MaxUint64}
}

// Next is the id of an event stored at ms (unix milliseconds) after the
// one numbered id, as a Redis stream numbers an entry: `<ms>-0`, or the
// id after id when ms is not later than it (the clock did not move on,
// or went back).
func (id ID) Next(ms uint64) ID {
	if next := (ID{MS: ms}); id.Less(next) {
		return next
	}
	return ID{id.MS, id.Seq + 1}
}

// keySize is the length of an id as a key.
const keySize = 16

// Key is the id as a bucket key: the time and the sequence big-endian, so
// keys sort as ids do.
func (id ID) Key() []byte {
	k := make([]byte, keySize)
	binary.BigEndian.PutUint64(k, id.MS)
	binary.BigEndian.PutUint64(k[8:], id.Seq)
	return k
}

// IDFromKey reads a key Key wrote; any other is MinID.
func IDFromKey(k []byte) ID {
	if len(k) != keySize {
		return ID{}
	}
	return ID{MS: binary.BigEndian.Uint64(k), Seq: binary.BigEndian.Uint64(k[8:])}
}
