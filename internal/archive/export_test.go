package archive

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// An export reads the archive page by page (256 events a page): every
// matching event comes out, once, newest first, whole, at every page
// boundary, on every store, with filters and with since/until.

// exportSizes are the numbers of events each case archives: none, one,
// and either side of one and several pages.
var exportSizes = []int{0, 1, page - 1, page, page + 1, 1000}

// exportStores opens an archive of a source on each store.
func exportStores(t *testing.T) map[string]func(t *testing.T, source string) *Archive {
	srv := testkit.StartRedis(t)
	path := filepath.Join(t.TempDir(), "store.db")
	open := func(t *testing.T, source string, provision func(ctx caddy.Context) (store.Store, func(), error)) *Archive {
		t.Helper()
		ctx, cancel := testkit.NewContext(t)
		s, cleanup, err := provision(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		rd, _ := redact.New(nil)
		a, err := New(Config{Source: source, Retention: time.Hour, Bodies: true, Redact: rd, Logger: zap.NewNop()}, s)
		if err != nil {
			cleanup()
			cancel()
			t.Fatal(err)
		}
		archiveStores.Store(a, s)
		t.Cleanup(func() {
			archiveStores.Delete(a)
			a.Stop()
			cleanup()
			cancel()
		})
		return a
	}
	return map[string]func(t *testing.T, source string) *Archive{
		"memory": func(t *testing.T, source string) *Archive {
			return open(t, source, func(ctx caddy.Context) (store.Store, func(), error) {
				s := &memstore.Store{}
				err := s.Provision(ctx)
				return s, func() { _ = s.Cleanup() }, err
			})
		},
		"file": func(t *testing.T, source string) *Archive {
			return open(t, source, func(ctx caddy.Context) (store.Store, func(), error) {
				s := &filestore.Store{Path: path}
				err := s.Provision(ctx)
				return s, func() { _ = s.Cleanup() }, err
			})
		},
		"redis": func(t *testing.T, source string) *Archive {
			return open(t, source, func(ctx caddy.Context) (store.Store, func(), error) {
				s := &redisstore.Store{Addresses: []string{srv.Addr()}, Timeout: caddy.Duration(5 * time.Second)}
				err := s.Provision(ctx)
				return s, func() { _ = s.Cleanup() }, err
			})
		},
	}
}

// archiveStores holds the store of each archive exportStores opened.
var archiveStores sync.Map

// exportEntry is the i-th event of a case: key k<i>, its own body.
func exportEntry(source string, i int, result string) *Entry {
	body := fmt.Appendf(nil, `{"n":%d}`, i)
	return &Entry{
		Request: event.Request{
			Source: source, Key: fmt.Sprint("k", i), Method: "POST", URI: "/hook",
			Headers: "X-N: " + fmt.Sprint(i) + "\r\n", Body: body, Received: time.Now(),
		},
		Result: result, Status: 200, BodyHash: sha256.Sum256(body), HasBody: true, BodyOwned: true,
	}
}

// appendEvents archives events from..to-1 of a case, in order, in
// batches; result gives each one's result.
func appendEvents(t *testing.T, a *Archive, from, to int, result func(i int) string) {
	t.Helper()
	for start := from; start < to; start += 128 {
		var es []*Entry
		for i := start; i < min(start+128, to); i++ {
			es = append(es, exportEntry(a.cfg.Source, i, result(i)))
		}
		if err := a.backend.appendBatch(context.Background(), es); err != nil {
			t.Fatal(err)
		}
	}
}

func allNew(int) string { return "new" }

// export runs an export of q and returns the events, checking that they
// come newest first, each once, whole.
func export(t *testing.T, a *Archive, q Query, limit int) []int {
	t.Helper()
	var got []int
	var prev event.ID
	err := a.Export(context.Background(), q, limit, func(ev *Event) error {
		id, ok := event.ParseID(ev.ID)
		if !ok {
			return fmt.Errorf("event id %q", ev.ID)
		}
		if len(got) > 0 && !id.Less(prev) {
			return fmt.Errorf("event %s after %s: not newest first", id, prev)
		}
		prev = id
		var n int
		if _, err := fmt.Sscanf(ev.Key, "k%d", &n); err != nil {
			return fmt.Errorf("key %q", ev.Key)
		}
		if want := fmt.Sprintf(`{"n":%d}`, n); ev.Body == nil || *ev.Body != want || ev.Headers["X-N"][0] != fmt.Sprint(n) {
			return fmt.Errorf("event %s (%s) not whole: headers %v, body present %v", ev.ID, ev.Key, ev.Headers, ev.Body != nil)
		}
		got = append(got, n)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantEvents checks that an export gave exactly want, in this order.
func wantEvents(t *testing.T, what string, got, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: exported %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is k%d, want k%d", what, i, got[i], want[i])
		}
	}
}

// descending returns the i with keep(i), for i from to-1 down to from.
func descending(from, to int, keep func(int) bool) []int {
	out := []int{}
	for i := to - 1; i >= from; i-- {
		if keep(i) {
			out = append(out, i)
		}
	}
	return out
}

func every(int) bool { return true }

// newestMS returns the milliseconds of the archive's newest event (0 when
// it holds none).
func newestMS(t *testing.T, a *Archive) uint64 {
	t.Helper()
	evs, _, err := a.Find(context.Background(), Query{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		return 0
	}
	id, _ := event.ParseID(evs[0].ID)
	return id.MS
}

// afterMS waits until the clock is past ms, so that the next event is
// numbered after it.
func afterMS(t *testing.T, ms uint64) {
	t.Helper()
	testkit.Eventually(t, time.Second, "the clock past the last event", func() bool {
		return uint64(time.Now().UnixMilli()) > ms
	})
}

func TestArchiveExportEveryPage(t *testing.T) {
	for name, open := range exportStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, n := range exportSizes {
				t.Run(fmt.Sprint(n), func(t *testing.T) {
					// every event
					a := open(t, fmt.Sprintf("all_%s_%d", name, n))
					appendEvents(t, a, 0, n, allNew)
					all := descending(0, n, every)
					wantEvents(t, "every event", export(t, a, Query{}, exportMax), all)
					// a count that ends inside a page, at its end, past it
					for _, limit := range []int{1, page - 1, page, page + 1} {
						wantEvents(t, fmt.Sprint("count ", limit), export(t, a, Query{}, limit), all[:min(limit, n)])
					}

					// filters: n matching events among 2n
					f := open(t, fmt.Sprintf("filtered_%s_%d", name, n))
					result := func(i int) string {
						if i%2 == 1 {
							return "replayed"
						}
						return "new"
					}
					appendEvents(t, f, 0, 2*n, result)
					even := func(i int) bool { return i%2 == 0 }
					wantEvents(t, "result=new", export(t, f, Query{Result: "new"}, exportMax), descending(0, 2*n, even))
					wantEvents(t, "status=200, result=replayed", export(t, f, Query{Result: "replayed", Status: func(s int) bool { return s == 200 }}, exportMax),
						descending(0, 2*n, func(i int) bool { return !even(i) }))
					if n > 0 {
						wantEvents(t, "key=k0", export(t, f, Query{Key: "k0"}, exportMax), []int{0})
					}

					// since/until: n events between three before and three after
					w := open(t, fmt.Sprintf("window_%s_%d", name, n))
					appendEvents(t, w, 0, 3, allNew)
					before := newestMS(t, w)
					afterMS(t, before)
					appendEvents(t, w, 3, 3+n, allNew)
					last := max(newestMS(t, w), before+1)
					afterMS(t, last)
					appendEvents(t, w, 3+n, 6+n, allNew)
					q := Query{Since: time.UnixMilli(int64(before + 1)), Until: time.UnixMilli(int64(last))}
					wantEvents(t, "since/until", export(t, w, q, exportMax), descending(3, 3+n, every))
					wantEvents(t, "since/until, result=new", export(t, w, Query{Since: q.Since, Until: q.Until, Result: "new"}, exportMax), descending(3, 3+n, every))
					wantEvents(t, "since alone", export(t, w, Query{Since: q.Since}, exportMax), descending(3, 6+n, every))
					wantEvents(t, "until alone", export(t, w, Query{Until: q.Until}, exportMax), descending(0, 3+n, every))
				})
			}
		})
	}
}

// exportMax is an export without count.
const exportMax = 1 << 31
