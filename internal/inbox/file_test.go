package inbox

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The inbox on the file store: events accepted with their keys, delivered,
// retried on the schedule, dead-lettered and redelivered, and kept across a
// close and reopen of the file.

func openFileStore(t testing.TB, path string) (*filestore.Store, func()) {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return s, func() {
		_ = s.Cleanup()
		cancel()
	}
}

func newTestInbox(t *testing.T, s store.Store, deliverTo string, retries ...time.Duration) *Inbox {
	t.Helper()
	if len(retries) == 0 {
		retries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
	}
	rd, _ := redact.New(nil)
	ib, err := New(Config{
		Source: "files", DeliverTo: deliverTo, Respond: 202, Retries: retries,
		// an attempt's time on a loaded machine: one cut short would be
		// an attempt more than the tests count
		Timeout: 10 * time.Second, Concurrency: 4, TTL: time.Hour, Redact: rd, Logger: zap.NewNop(),
	}, s)
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

func accept(t *testing.T, ib *Inbox, key string) store.ClaimResult {
	t.Helper()
	body := []byte(`{"id":"` + key + `"}`)
	hash := sha256.Sum256(body)
	ev := event.Request{Source: "files", Key: key, StoreKey: "idem:files:" + key, Method: "POST", URI: "/hook",
		Headers: "Content-Type: application/json\r\n", Body: body, Received: time.Now()}
	res, err := ib.Accept(t.Context(), store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, &hash, &ev)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestFileInboxDeliversRetriesAndDeadLetters(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string][]string{} // key -> attempts
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		got[key] = append(got[key], r.Header.Get("Webhook-Attempt"))
		n := len(got[key])
		mu.Unlock()
		switch {
		case key == "refused":
			w.WriteHeader(http.StatusBadRequest)
		case key == "flaky" && n < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer closeStore()
	ib := newTestInbox(t, s, up.URL)
	for _, key := range []string{"ok", "flaky", "refused"} {
		if res := accept(t, ib, key); res.State != store.StateClaimed {
			t.Fatalf("accepting %s: %s", key, res.State)
		}
	}
	if res := accept(t, ib, "ok"); res.State != store.StateCompleted {
		t.Fatalf("a duplicate of an accepted event: %s, want completed (answered as the first)", res.State)
	}
	ib.Start()
	defer ib.Stop()
	testkit.Eventually(t, 30*time.Second, "every event delivered or dead", func() bool {
		c, err := ib.Counts(t.Context())
		return err == nil && c.Pending == 0 && c.Scheduled == 0 && c.Dead == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got["ok"]) != "[1]" || fmt.Sprint(got["flaky"]) != "[1 2 3]" || fmt.Sprint(got["refused"]) != "[1]" {
		t.Fatalf("attempts: %v", got)
	}
	dead, err := ib.DeadLetters(t.Context(), "", "-", 10)
	if err != nil || len(dead) != 1 || dead[0].Key != "refused" || dead[0].LastStatus != 400 || dead[0].Attempts != 1 {
		t.Fatalf("dead letters: %+v %v", dead, err)
	}
	// the delivered key answers duplicates for ttl from its delivery
	info, err := s.Inspect(t.Context(), "idem:files:ok")
	if err != nil || info.State != store.KeyCompleted || info.Left > time.Hour {
		t.Fatalf("delivered key: %s, %s left, %v; want completed with at most the ttl left", info.State, info.Left, err)
	}
}

// TestFileInboxKeepsEventsAcrossReopen: events accepted while the
// application is down, and one in its retry wait, are delivered by an inbox
// opened on the same file later; a dead letter is still there, and is
// redelivered.
func TestFileInboxKeepsEventsAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	down := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Header.Get("Idempotency-Key") == "refused" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	s, closeStore := openFileStore(t, path)
	ib := newTestInbox(t, s, down.URL, time.Hour)
	for i := range 5 {
		accept(t, ib, fmt.Sprint("kept", i))
	}
	accept(t, ib, "refused")
	ib.Start()
	testkit.Eventually(t, 30*time.Second, "every event tried once", func() bool {
		c, _ := ib.Counts(t.Context())
		return c.Scheduled == 5 && c.Dead == 1
	})
	ib.Stop()
	closeStore()

	var mu sync.Mutex
	seen := map[string]int{}
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	s2, closeStore2 := openFileStore(t, path)
	defer closeStore2()
	ib2 := newTestInbox(t, s2, up.URL, 10*time.Millisecond)
	c, err := ib2.Counts(t.Context())
	if err != nil || c.Scheduled != 5 || c.Dead != 1 {
		t.Fatalf("counts after reopening: %+v %v", c, err)
	}
	// the retries were scheduled an hour away: redeliver them now through
	// the dead letter path is not how they go; make them due instead
	if err := ib2.q.moveDue(t.Context(), time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := ib2.RedeliverAll(t.Context(), "")
	if err != nil || n != 1 {
		t.Fatalf("redelivering the dead letter: %d, %v", n, err)
	}
	ib2.Start()
	defer ib2.Stop()
	testkit.Eventually(t, 30*time.Second, "every kept event delivered", func() bool {
		c, _ := ib2.Counts(t.Context())
		return c.Pending == 0 && c.Scheduled == 0 && c.Dead == 0 && up.Calls.Load() == 6
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range 5 {
		if seen[fmt.Sprint("kept", i)] != 1 {
			t.Fatalf("deliveries after reopening: %v", seen)
		}
	}
	if seen["refused"] != 1 {
		t.Fatalf("the redelivered dead letter: %v", seen)
	}
}

// TestFileInboxCountsEveryEventInSomeState: while events go from ready to
// delivery to a retry wait and back, Counts finds each one that is not yet
// delivered in one of its states; none is missing from every count for a
// moment (a dashboard or a test waiting for "nothing pending" would take
// such a moment for the end).
func TestFileInboxCountsEveryEventInSomeState(t *testing.T) {
	t.Parallel()
	const events = 40
	var mu sync.Mutex
	tries := map[string]int{}
	var ok atomic.Int64
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		tries[key]++
		n := tries[key]
		mu.Unlock()
		if n < 4 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		ok.Add(1) // counted before the inbox hears the answer
		w.WriteHeader(http.StatusOK)
	})
	s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer closeStore()
	ib := newTestInbox(t, s, up.URL, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond)
	for i := range events {
		accept(t, ib, fmt.Sprint("e", i))
	}
	ib.Start()
	defer ib.Stop()
	deadline := time.Now().Add(2 * time.Minute)
	samples := 0
	for {
		c, err := ib.Counts(t.Context())
		answered := ok.Load() // read after the counts: an upper bound of what had left the queue
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if c.Dead != 0 {
			t.Fatalf("dead letters: %+v", c)
		}
		if missing := events - answered - (c.Pending + c.Scheduled); missing > 0 {
			t.Fatalf("sample %d: %d event(s) in no state: %+v with %d delivered of %d", samples, missing, c, answered, events)
		}
		if answered == events && c.Pending == 0 && c.Scheduled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered in time: %+v, %d delivered", c, answered)
		}
	}
	if samples < 10 {
		t.Fatalf("only %d samples: the test watched too little of the delivery", samples)
	}
}

// The inbox's own headers are the inbox's to say: an event stored with a
// Webhook-Replay-Suspected, Webhook-Order-Broken or Webhook-Attempt from
// its sender is delivered without them (its attempt number the inbox's),
// whatever the forward mode (none here: the provider's headers as
// received).
func TestInboxHeadersFromTheSenderAreNotPassedOn(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusOK)
	})
	s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer closeStore()
	ib := newTestInbox(t, s, up.URL)
	body := []byte(`{"id":"sent"}`)
	hash := sha256.Sum256(body)
	ev := event.Request{Source: "files", Key: "sent", StoreKey: "idem:files:sent", Method: "POST", URI: "/hook",
		Headers: "Content-Type: application/json\r\nX-Provider: kept\r\nWebhook-Replay-Suspected: forged\r\nWebhook-Order-Broken: forged\r\nWebhook-Attempt: 99\r\n",
		Body:    body, Received: time.Now()}
	if res, err := ib.Accept(t.Context(), store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, &hash, &ev); err != nil || res.State != store.StateClaimed {
		t.Fatalf("accept: %s %v", res.State, err)
	}
	ib.Start()
	defer ib.Stop()
	select {
	case h := <-got:
		if h.Get("X-Provider") != "kept" || h.Get("Webhook-Attempt") != "1" ||
			len(h.Values("Webhook-Replay-Suspected")) > 0 || len(h.Values("Webhook-Order-Broken")) > 0 {
			t.Fatalf("delivered headers %v: want the sender's X-Provider, attempt 1, and none of the inbox's headers from the sender", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
}
