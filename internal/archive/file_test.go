package archive

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The archive on the file store: appended with a key's completion or in the
// background, searched newest first, trimmed to max_events and retention,
// and kept across a close and reopen of the file.

func openFileArchive(t *testing.T, path string, maxEvents int, retention time.Duration) (*filestore.Store, *Archive, func()) {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	rd, _ := redact.New(nil)
	a, err := New(Config{Source: "files", Retention: retention, MaxEvents: maxEvents, Bodies: true, Redact: rd, Logger: zap.NewNop()}, s)
	if err != nil {
		t.Fatal(err)
	}
	return s, a, func() {
		a.Stop()
		_ = s.Cleanup()
		cancel()
	}
}

func entry(key, result string, received time.Time) *Entry {
	body := []byte(`{"id":"` + key + `"}`)
	return &Entry{
		Request:  event.Request{Source: "files", Key: key, Method: "POST", URI: "/hook", Headers: "X-A: b\r\n", Body: body, Received: received},
		Result:   result,
		Status:   200,
		BodyHash: sha256.Sum256(body),
		HasBody:  true,
	}
}

func keysOf(evs []Event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Key)
	}
	return fmt.Sprint(out)
}

func TestFileArchive(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	s, a, closeAll := openFileArchive(t, path, 5, time.Hour)
	// one event with its key's completion, in the same commit
	owner := store.NewOwner()
	if _, err := s.Claim(t.Context(), "idem:files:k0", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte("k0"))
	rec := record.Encode(nil, 200, http.Header{}, &hash)
	if err := a.CompleteAndAppend(t.Context(), store.Claim{Key: "idem:files:k0", Owner: owner}, rec, time.Hour, entry("k0", "new", time.Now())); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 8; i++ {
		a.Add(entry(fmt.Sprint("k", i), "replayed", time.Now()))
	}
	closeAll() // the queue appends what it holds first

	_, a2, closeAll2 := openFileArchive(t, path, 5, time.Hour)
	defer closeAll2()
	evs, cursor, err := a2.Find(t.Context(), Query{Count: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(evs); got != "[k7 k6 k5 k4 k3]" || cursor != "" {
		t.Fatalf("after reopening, trimmed to 5: %s, cursor %q", got, cursor)
	}
	if n, err := a2.Size(t.Context()); err != nil || n != 5 {
		t.Fatalf("size %d, %v; want 5", n, err)
	}
	evs, cursor, err = a2.Find(t.Context(), Query{Count: 2})
	if err != nil || keysOf(evs) != "[k7 k6]" || cursor == "" {
		t.Fatalf("first page: %s %q %v", keysOf(evs), cursor, err)
	}
	next, _ := event.ParseID(cursor)
	evs, _, err = a2.Find(t.Context(), Query{Count: 2, Cursor: next, HasCursor: true})
	if err != nil || keysOf(evs) != "[k5 k4]" {
		t.Fatalf("second page: %s %v", keysOf(evs), err)
	}
	id, _ := event.ParseID(evs[0].ID)
	ev, ok, err := a2.Event(t.Context(), id)
	if err != nil || !ok || ev.Key != "k5" || ev.Body == nil || *ev.Body != `{"id":"k5"}` || ev.Headers["X-A"][0] != "b" {
		t.Fatalf("one event, whole: %+v %v %v", ev, ok, err)
	}
}

func TestFileArchiveRetention(t *testing.T) {
	// not parallel: the package clock is swapped (retention is read from
	// it, and event ids are numbered by it), so no poll can come late
	clock := useFakeClock(t)
	_, a, closeAll := openFileArchive(t, filepath.Join(t.TempDir(), "store.db"), 100, time.Hour)
	defer closeAll()
	a.Add(entry("old", "new", now()))
	testkit.Eventually(t, 30*time.Second, "the first event archived", func() bool {
		n, _ := a.Size(t.Context())
		return n == 1
	})
	clock.advance(61 * time.Minute)
	a.Add(entry("new", "new", now()))
	testkit.Eventually(t, 30*time.Second, "the old event trimmed by retention", func() bool {
		evs, _, _ := a.Find(t.Context(), Query{Count: 10})
		return keysOf(evs) == "[new]"
	})
}

// A count read while an event is appended is never kept from a view older
// than the append: the archive's size, read at once on a new archive and
// polled while its first event is appended, comes to 1 and stays there
// (it once kept the stale 0 of a read that began before the append
// committed, for good).
func TestFileArchiveSizeReadWhileAppending(t *testing.T) {
	// not parallel: the package clock is swapped, as for retention, under
	// which the race showed (a frozen clock makes it likely)
	useFakeClock(t)
	for i := range 50 {
		_, a, closeAll := openFileArchive(t, filepath.Join(t.TempDir(), fmt.Sprint("store", i, ".db")), 100, time.Hour)
		a.Add(entry("first", "new", now()))
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := a.Size(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				evs, _, _ := a.Find(t.Context(), Query{Count: 10})
				t.Fatalf("archive %d: size %d with %s archived", i, n, keysOf(evs))
			}
			time.Sleep(10 * time.Millisecond)
		}
		closeAll()
	}
}
