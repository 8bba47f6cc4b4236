package event

import (
	"bytes"
	"math"
	"slices"
	"testing"
)

// TestIDOrder: ids order as Redis orders stream entries (the time, then
// the sequence, as numbers), as written, as ids and as bucket keys alike.
func TestIDOrder(t *testing.T) {
	t.Parallel()
	ordered := []ID{MinID, {0, 1}, {9, 0}, {9, 10}, {10, 0}, {10, 2}, {1 << 40, 0}, {math.MaxUint64, 0}, MaxID}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := a.Compare(b); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", a, b, got, want)
			}
			if got := CompareIDs(a.String(), b.String()); got != want {
				t.Errorf("CompareIDs(%q, %q) = %d, want %d", a, b, got, want)
			}
			if got := bytes.Compare(a.Key(), b.Key()); got != want {
				t.Errorf("keys of %v and %v compare %d, want %d", a, b, got, want)
			}
			if a.Less(b) != (want < 0) {
				t.Errorf("%v.Less(%v) = %v", a, b, a.Less(b))
			}
		}
		if back := IDFromKey(a.Key()); back != a {
			t.Errorf("IDFromKey(%v.Key()) = %v", a, back)
		}
		if back, ok := ParseID(a.String()); !ok || back != a {
			t.Errorf("ParseID(%q) = %v, %v", a, back, ok)
		}
	}
	// "10-2" before "9-10" as strings, after it as ids
	ids := []string{"10-2", "9-10", "10-0", "9-0"}
	slices.SortFunc(ids, CompareIDs)
	if want := []string{"9-0", "9-10", "10-0", "10-2"}; !slices.Equal(ids, want) {
		t.Errorf("sorted %v, want %v", ids, want)
	}
	if CompareIDs("junk", "0-0") != 0 || CompareIDs("junk", "0-1") != -1 {
		t.Error("an id that does not parse does not sort as MinID")
	}
	if IDFromKey([]byte("short")) != MinID {
		t.Error("a key of another length is not MinID")
	}
}

// TestIDNext: ids are given out as Redis numbers stream entries: the
// time, and a sequence within one millisecond or while the clock does not
// move on.
func TestIDNext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		last ID
		ms   uint64
		want ID
	}{
		{MinID, 5, ID{5, 0}},
		{ID{5, 0}, 6, ID{6, 0}},
		{ID{5, 0}, 5, ID{5, 1}}, // the same millisecond
		{ID{5, 7}, 5, ID{5, 8}}, // and again
		{ID{5, 7}, 3, ID{5, 8}}, // the clock went back
		{ID{5, 7}, 0, ID{5, 8}}, // to zero
		{MinID, 0, ID{0, 1}},    // the first id is never MinID's equal
		{ID{5, 7}, 1000, ID{1000, 0}},
	} {
		if got := tc.last.Next(tc.ms); got != tc.want {
			t.Errorf("%v.Next(%d) = %v, want %v", tc.last, tc.ms, got, tc.want)
		}
	}
}

// TestParseStart: a range starts at a whole id or at a millisecond's
// first id, as XRANGE's start.
func TestParseStart(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]ID{"17-3": {17, 3}, "17": {17, 0}, "0": MinID} {
		if got, ok := ParseStart(s); !ok || got != want {
			t.Errorf("ParseStart(%q) = %v, %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "-", "+", "x", "17-", "-3", "17-x", "1.5"} {
		if _, ok := ParseStart(s); ok {
			t.Errorf("ParseStart(%q) accepted", s)
		}
	}
}
