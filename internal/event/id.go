package event

import (
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

// String writes the id as `<ms>-<seq>`.
func (id ID) String() string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Less reports whether id comes before o.
func (id ID) Less(o ID) bool {
	return id.MS < o.MS || id.MS == o.MS && id.Seq < o.Seq
}

// Prev returns the id just before id (id must not be MinID).
func (id ID) Prev() ID {
	if id.Seq > 0 {
		return ID{id.MS, id.Seq - 1}
	}
	return ID{id.MS - 1, math.MaxUint64}
}
