//go:build porting

package webhookidempotency

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
)

// TestArchiveRing: the ring keeps the newest max_events in order, numbers
// events like a stream (one millisecond, several events), drops what is
// older than retention, and keeps the newest when its bound shrinks.
func TestArchiveRing(t *testing.T) {
	clock := useFakeClock(t)
	r := new(archiveRing)
	r.setMax(4)
	ids := func() []string {
		m := &memoryArchive{ring: r, retention: time.Hour}
		evs, err := m.page(context.Background(), maxStreamID, minStreamID, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Key)
		}
		return out
	}
	add := func(key string) {
		r.add(&archiveEntry{key: key, received: now()}, time.Hour)
	}
	for i := range 3 {
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k2 k1 k0" {
		t.Fatalf("ring: %s", got)
	}
	if r.at(0).id.seq != 0 || r.at(2).id.seq != 2 || r.at(0).id.ms != r.at(2).id.ms {
		t.Fatalf("ids within one millisecond: %v %v", r.at(0).id, r.at(2).id)
	}
	for i := 3; i < 7; i++ {
		clock.advance(time.Millisecond)
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k6 k5 k4 k3" {
		t.Fatalf("full ring: %s", got)
	}
	// retention: everything but the newest is older than an hour
	clock.advance(time.Hour + time.Millisecond)
	add("k7")
	if got := strings.Join(ids(), " "); got != "k7" {
		t.Fatalf("after retention: %s", got)
	}
	// the ring wraps after a trim, and grows back
	for i := 8; i < 12; i++ {
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k11 k10 k9 k8" {
		t.Fatalf("after wrapping: %s", got)
	}
	r.setMax(2)
	if got := strings.Join(ids(), " "); got != "k11 k10" {
		t.Fatalf("after shrinking: %s", got)
	}
	r.setMax(8)
	add("k12")
	if got := strings.Join(ids(), " "); got != "k12 k11 k10" {
		t.Fatalf("after growing: %s", got)
	}
}

// TestArchiveMemoryAndReload: on the memory store the archive keeps its
// events across a reload that changes the handler, is bounded by
// max_events, and the search filters by key, result and status.
func TestArchiveMemoryAndReload(t *testing.T) {
	const source = "arch_memory"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.Contains(r.URL.Path, "missing") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := freePort(t)
	site := func(maxEvents int) string {
		return archiveSite(port, source, "memory", fmt.Sprintf("{\n\t\t\tmax_events %d\n\t\t\tredact json:secret\n\t\t}", maxEvents), up.addr())
	}
	c := startCaddy(t, "", site(5))
	url := siteURL(port)
	for i := range 3 {
		body := fmt.Sprintf(`{"id":"m%d","secret":"s%d"}`, i, i)
		if resp, b := signedPost(t, url+"/hook", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("new %d: %s %s", i, resp.Status, b)
		}
	}
	signedPost(t, url+"/hook", `{"id":"m0","secret":"s0"}`) // replayed
	signedPost(t, url+"/missing", `{"id":"m404"}`)          // a recorded 404
	evs := findAll(t, archiveOf(t, source))
	if len(evs) != 5 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	if evs[0].Key != "m404" || evs[0].Status != 404 || evs[1].Result != resultReplayed || evs[4].Key != "m0" {
		t.Fatalf("events, newest first: %+v", evs)
	}
	ev := evs[4]
	ev.whole()
	if ev.Body == nil || *ev.Body != `{"id":"m0","secret":"[redacted]"}` || !ev.BodyRedacted || ev.Headers["X-Sig"] == nil {
		t.Fatalf("event: %+v", ev)
	}

	// a reload with another bound keeps the events
	if err := c.reload(site(6)); err != nil {
		t.Fatal(err)
	}
	resp, b := postAfterReload(t, url+"/hook", []byte(`{"id":"m5"}`), "X-Sig", sigtest.HMACHex(archiveSecret, `{"id":"m5"}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after reload: %s %s", resp.Status, b)
	}
	evs = findAll(t, archiveOf(t, source))
	if len(evs) != 6 || evs[0].Key != "m5" || evs[5].Key != "m0" {
		t.Fatalf("after reload: %+v", evs)
	}
	signedPost(t, url+"/hook", `{"id":"m6"}`)
	evs = findAll(t, archiveOf(t, source))
	if len(evs) != 6 || evs[0].Key != "m6" || evs[5].Key != "m1" {
		t.Fatalf("bounded at 6: %+v", evs)
	}

	// search
	a := archiveOf(t, source)
	for _, tc := range []struct {
		q    archiveQuery
		want string
	}{
		{archiveQuery{key: "m1", count: 10}, "m1"},
		{archiveQuery{result: resultReplayed, count: 10}, "m0"},
		{archiveQuery{status: statusOf(404), hasStatus: true, count: 10}, "m404"},
		{archiveQuery{count: 2}, "m6 m5"},
	} {
		got, _, err := a.find(context.Background(), tc.q, archiveScanMax)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, ev := range got {
			keys = append(keys, ev.Key)
		}
		if strings.Join(keys, " ") != tc.want {
			t.Errorf("%+v: %v, want %s", tc.q, keys, tc.want)
		}
	}
}

func statusOf(codes ...int) statusSet {
	var s statusSet
	for _, c := range codes {
		s.add(c)
	}
	return s
}
