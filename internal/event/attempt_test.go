package event

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// An attempt and a history go through their encoding unchanged; a
// history keeps the newest MaxAttempts and counts them all.
func TestHistoryEncoding(t *testing.T) {
	var h History
	for n := 1; n <= MaxAttempts+3; n++ {
		h.Add(Attempt{
			At: time.UnixMicro(1_700_000_000_000_000 + int64(n)).UTC(), Destination: "http://app/hook", Number: n,
			Status: 500 + n%2, Latency: time.Duration(n) * time.Millisecond, Headers: "X-N: 1\r\n",
			Body: []byte{0xff, byte(n)}, Truncated: n%2 == 0, Error: strings.Repeat("e", n%3),
		})
	}
	got, err := ParseHistory(AppendHistory(nil, &h))
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != MaxAttempts+3 || len(got.Attempts) != MaxAttempts || got.Attempts[0].Number != 4 {
		t.Fatalf("%d of %d, from %d", len(got.Attempts), got.Total, got.Attempts[0].Number)
	}
	for i, a := range got.Attempts {
		w := h.Attempts[i]
		if !a.At.Equal(w.At) || a.Destination != w.Destination || a.Number != w.Number || a.Status != w.Status ||
			a.Latency != w.Latency || a.Headers != w.Headers || string(a.Body) != string(w.Body) ||
			a.Truncated != w.Truncated || a.Error != w.Error {
			t.Fatalf("attempt %d: %+v, want %+v", i, a, w)
		}
	}
	if _, err := ParseHistory([]byte{3, 9, 1}); err == nil {
		t.Fatal("a damaged history parsed")
	}
}

// Kept headers are whole lines in name order within the limit, the
// redacted ones redacted, hop-by-hop ones left out.
func TestKeptHeaders(t *testing.T) {
	h := http.Header{"X-B": {"2"}, "Set-Cookie": {"s=1"}, "X-A": {"1"}, "Connection": {"close"}}
	got, cut := KeptHeaders(h, func(n string) bool { return n == "Set-Cookie" }, 1000)
	if got != "Set-Cookie: [redacted]\r\nX-A: 1\r\nX-B: 2\r\n" || cut {
		t.Fatalf("%q %v", got, cut)
	}
	got, cut = KeptHeaders(h, nil, 20)
	if got != "Set-Cookie: s=1\r\n" || !cut {
		t.Fatalf("within 20 bytes: %q %v", got, cut)
	}
	if allocs := testing.AllocsPerRun(100, func() { KeptHeaders(h, nil, 1000) }); allocs > 1 {
		t.Fatalf("%v allocations, want the block's only", allocs)
	}
}

// A history followed by one kept apart counts both and keeps the newest
// MaxAttempts of both, oldest first, neither changed.
func TestHistoryThen(t *testing.T) {
	own := History{Total: 3, Attempts: []Attempt{{Status: 2}, {Status: 3}}}
	var later History
	for i := range MaxAttempts {
		later.Add(Attempt{Status: 100 + i})
	}
	later.Total += 5 // five dropped before
	got := own.Then(later)
	if got.Total != 3+MaxAttempts+5 || len(got.Attempts) != MaxAttempts ||
		got.Attempts[0].Status != 100 || got.Attempts[MaxAttempts-1].Status != 100+MaxAttempts-1 {
		t.Fatalf("%d attempts of %d, first %d", len(got.Attempts), got.Total, got.Attempts[0].Status)
	}
	short := own.Then(History{Total: 1, Attempts: []Attempt{{Status: 7}}})
	if short.Total != 4 || len(short.Attempts) != 3 || short.Attempts[0].Status != 2 || short.Attempts[2].Status != 7 {
		t.Fatalf("%+v", short)
	}
	if own.Total != 3 || len(own.Attempts) != 2 || own.Then(History{}).Total != 3 {
		t.Fatalf("changed: %+v", own)
	}
	listed := ListedHistory([]string{"4\n" + string(AppendAttempt(nil, &Attempt{Status: 9})), "bad", "5\n" + string(AppendAttempt(nil, &Attempt{Status: 10}))})
	if listed.Total != 5 || len(listed.Attempts) != 2 || listed.Attempts[1].Status != 10 {
		t.Fatalf("listed: %+v", listed)
	}
}
