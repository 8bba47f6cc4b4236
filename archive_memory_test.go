package webhookidempotency

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive on the memory store, as the handler runs it in Caddy. The
// ring itself is tested in internal/archive.

// TestArchiveMemoryAndReload: on the memory store the archive keeps its
// events across a reload that changes the handler, is bounded by
// max_events, and the search filters by key, result and status.
func TestArchiveMemoryAndReload(t *testing.T) {
	const source = "arch_memory"
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.Contains(r.URL.Path, "missing") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	site := func(maxEvents int) string {
		return archiveSite(port, source, "memory", fmt.Sprintf("{\n\t\t\tmax_events %d\n\t\t\tredact json:secret\n\t\t}", maxEvents), up.Addr())
	}
	c := testkit.StartCaddy(t, "", site(5))
	url := testkit.SiteURL(port)
	for i := range 3 {
		body := fmt.Sprintf(`{"id":"m%d","secret":"s%d"}`, i, i)
		if resp, b := signedPost(t, url+"/hook", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("new %d: %s %s", i, resp.Status, b)
		}
	}
	signedPost(t, url+"/hook", `{"id":"m0","secret":"s0"}`) // replayed
	signedPost(t, url+"/missing", `{"id":"m404"}`)          // a recorded 404
	evs := archiveFindAll(t, archiveOf(t, source))
	if len(evs) != 5 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	if evs[0].Key != "m404" || evs[0].Status != 404 || evs[1].Result != results.Replayed || evs[4].Key != "m0" {
		t.Fatalf("events, newest first: %+v", evs)
	}
	id, _ := event.ParseID(evs[4].ID)
	ev, ok, err := archiveOf(t, source).Event(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("event %s: %v %v", evs[4].ID, ok, err)
	}
	if ev.Key != "m0" || ev.Body == nil || *ev.Body != `{"id":"m0","secret":"[redacted]"}` || !ev.BodyRedacted || ev.Headers["X-Sig"] == nil {
		t.Fatalf("event: %+v", ev)
	}

	// a reload with another bound keeps the events
	if err := c.Reload(site(6)); err != nil {
		t.Fatal(err)
	}
	resp, b := testkit.PostAfterReload(t, url+"/hook", []byte(`{"id":"m5"}`), "X-Sig", sigtest.HMACHex(archiveSecret, `{"id":"m5"}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after reload: %s %s", resp.Status, b)
	}
	evs = archiveFindAll(t, archiveOf(t, source))
	if len(evs) != 6 || evs[0].Key != "m5" || evs[5].Key != "m0" {
		t.Fatalf("after reload: %+v", evs)
	}
	signedPost(t, url+"/hook", `{"id":"m6"}`)
	evs = archiveFindAll(t, archiveOf(t, source))
	if len(evs) != 6 || evs[0].Key != "m6" || evs[5].Key != "m1" {
		t.Fatalf("bounded at 6: %+v", evs)
	}

	// search
	a := archiveOf(t, source)
	for _, tc := range []struct {
		q    archive.Query
		want string
	}{
		{archive.Query{Key: "m1", Count: 10}, "m1"},
		{archive.Query{Result: results.Replayed, Count: 10}, "m0"},
		{archive.Query{Status: archiveStatusOf(404), Count: 10}, "m404"},
		{archive.Query{Count: 2}, "m6 m5"},
	} {
		got, _, err := a.Find(context.Background(), tc.q)
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

// archiveStatusOf is the status filter of a search for codes, as the
// admin API builds it.
func archiveStatusOf(codes ...int) func(int) bool {
	var s statusSet
	for _, c := range codes {
		s.add(c)
	}
	return s.has
}
