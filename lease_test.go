package webhookidempotency

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

var errStoreDown = errors.New("store down")

// A completion that fails is retried, the lease renewed every third of it
// meanwhile, until it succeeds, the key is no longer the request's, or the
// lease has run out (docs/stores.md, "When Redis fails").
func TestRetryCompletion(t *testing.T) {
	const lease = 3 * time.Second
	for _, tc := range []struct {
		name      string
		failures  int   // complete fails this many times, then succeeds
		completes error // or answers this from then on
		renewErr  error // renew's answer
		wantCalls int
		wantErr   error
		wantTook  time.Duration
		wantRenew int
	}{
		{name: "recorded at once", wantCalls: 1},
		// 50+100+200+400+500 ms of pauses: one renewal, at 1s
		{name: "recorded after a failover", failures: 5, renewErr: errStoreDown, wantCalls: 6, wantTook: 1250 * time.Millisecond, wantRenew: 1},
		{name: "no longer owned", completes: store.ErrNotOwner, wantCalls: 1, wantErr: store.ErrNotOwner},
		{name: "lost after the failover", failures: 2, completes: store.ErrNotOwner, wantCalls: 3, wantErr: store.ErrNotOwner, wantTook: 150 * time.Millisecond},
		// nothing renews the lease: it runs out 3s after it was held
		{name: "store down for longer than the lease", failures: 1 << 20, renewErr: errStoreDown, wantCalls: 10, wantErr: errStoreDown, wantTook: lease, wantRenew: 2},
		// renewals keep the key, and retries end one lease after the first call
		{name: "renews but cannot record", failures: 1 << 20, wantCalls: 10, wantErr: errStoreDown, wantTook: lease, wantRenew: 2},
		{name: "renewal finds the key taken", failures: 1 << 20, renewErr: store.ErrNotOwner, wantCalls: 5, wantErr: store.ErrNotOwner, wantTook: 1250 * time.Millisecond, wantRenew: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				calls, renews := 0, 0
				complete := func() error {
					calls++
					if calls <= tc.failures {
						return errStoreDown
					}
					return tc.completes
				}
				renew := func() error { renews++; return tc.renewErr }
				start := time.Now()
				n, err := retryCompletion(complete, renew, lease, start)
				if took := time.Since(start); n != tc.wantCalls || !errors.Is(err, tc.wantErr) || took != tc.wantTook || renews != tc.wantRenew {
					t.Fatalf("%d calls, %v, after %v, %d renewals; want %d calls, %v, after %v, %d renewals",
						n, err, took, renews, tc.wantCalls, tc.wantErr, tc.wantTook, tc.wantRenew)
				}
			})
		})
	}
}

// flakyStore is a real store whose Complete fails while fail says so.
type flakyStore struct {
	store.Store
	fail func() bool
}

func (s flakyStore) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	if s.fail() {
		return errStoreDown
	}
	return s.Store.Complete(ctx, key, owner, record, ttl)
}

// An answer whose recording fails at first is recorded once the store
// answers again, before it is sent: a duplicate sent after it gets the
// replay, not a 409 for a key left in flight (and, after the lease, a
// second execution). A recording that fails for longer than the lease is
// counted.
func TestHandlerRetriesAFailedRecording(t *testing.T) {
	var failures atomic.Int64
	// the three failed calls take 150 ms of pauses: a lease of seconds
	// leaves them the time on a loaded machine
	const lease = 3 * time.Second
	h := newTestHandler(t, &Handler{Source: "retried_recording", Lease: caddy.Duration(lease)})
	h.store.backend = flakyStore{Store: h.store.backend, fail: func() bool { return failures.Add(-1) >= 0 }}
	var calls atomic.Int64
	// the source's counters are the process's: an earlier run's (-count)
	// are still in them
	unrecorded := counterValue(t, h.metrics.unrecorded)

	failures.Store(3)
	first := serve(h, "evt_flaky", "payload", countingNext(&calls))
	if first.err != nil || first.w.Code != http.StatusOK {
		t.Fatalf("first delivery: %d %v", first.w.Code, first.err)
	}
	dup := serve(h, "evt_flaky", "payload", countingNext(&calls))
	if dup.result != "replayed" || dup.w.Body.String() != first.w.Body.String() || calls.Load() != 1 {
		t.Fatalf("duplicate after a recording that failed 3 times: %s %d %q, %d executions; want the replay of %q",
			dup.result, dup.w.Code, dup.w.Body.String(), calls.Load(), first.w.Body.String())
	}
	if n := counterValue(t, h.metrics.unrecorded) - unrecorded; n != 0 {
		t.Fatalf("answers_unrecorded_total grew by %v after a recording that succeeded", n)
	}

	failures.Store(1 << 30)
	start := time.Now()
	lost := serve(h, "evt_lost", "payload", countingNext(&calls))
	if lost.w.Code != http.StatusOK {
		t.Fatalf("delivery whose recording always fails: %d, want the application's 200", lost.w.Code)
	}
	if took := time.Since(start); took < lease {
		t.Fatalf("the recording was given up after %v, before the lease (%v) ran out", took, lease)
	}
	if n := counterValue(t, h.metrics.unrecorded) - unrecorded; n != 1 {
		t.Fatalf("answers_unrecorded_total grew by %v after a recording that failed for a whole lease, want 1", n)
	}
}

// counterValue reads a counter.
func counterValue(t testing.TB, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// renewCounter is a claim whose renewals are counted, at the (bubble's)
// time each was made; renew answers what err says.
type renewCounter struct {
	mu  sync.Mutex
	at  []time.Time
	err error
}

func (c *renewCounter) name() string { return "counted" }
func (c *renewCounter) renew(ctx context.Context, lease time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	return c.err
}
func (c *renewCounter) completes(int) bool         { return true }
func (c *renewCounter) complete([]byte, int) error { return nil }
func (c *renewCounter) release()                   {}

func (c *renewCounter) renewals() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// A claim in flight is renewed once a third of its lease has passed since
// it was held, and before half of it has: over ten leases, every renewal
// comes between lease/3 and lease/2 after the one before. Once stopped it
// is renewed no more, and with no claim in flight the renewer's goroutine
// ends.
func TestRenewalKeepsTheLeaseAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		h := &Handler{Lease: caddy.Duration(lease), logger: zap.NewNop(), renewer: new(renewer)}
		var c renewCounter
		var rn renewal
		start := time.Now()
		h.startRenewal(&rn, &c, start)
		time.Sleep(10 * lease)
		synctest.Wait()
		at := c.renewals()
		if len(at) < 20 || len(at) > 30 {
			t.Fatalf("%d renewals in ten leases, want 20 to 30 (one every lease/3 to lease/2)", len(at))
		}
		prev := start
		for i, a := range at {
			if gap := a.Sub(prev); gap < lease/3 || gap > lease/2 {
				t.Fatalf("renewal %d came %v after the lease was held, want %v to %v", i, gap, lease/3, lease/2)
			}
			prev = a
		}
		rn.stop()
		time.Sleep(10 * lease)
		synctest.Wait()
		if n := len(c.renewals()); n != len(at) {
			t.Fatalf("%d renewals after the renewal stopped", n-len(at))
		}
		h.renewer.mu.Lock()
		running, first := h.renewer.running, h.renewer.first
		h.renewer.mu.Unlock()
		if running || first != nil {
			t.Fatalf("renewer still running (%v) or holding a claim (%v) with none in flight", running, first != nil)
		}
	})
}

// A renewal that finds the key no longer the request's is not tried again,
// while the other claims in flight go on being renewed; one that fails is
// tried again at the next look.
func TestRenewalOfALostKeyEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		h := &Handler{Lease: caddy.Duration(lease), logger: zap.NewNop(), renewer: new(renewer)}
		lost := &renewCounter{err: store.ErrNotOwner}
		failing := &renewCounter{err: errStoreDown}
		kept := &renewCounter{}
		var r1, r2, r3 renewal
		h.startRenewal(&r1, lost, time.Now())
		h.startRenewal(&r2, failing, time.Now())
		h.startRenewal(&r3, kept, time.Now())
		time.Sleep(10 * lease)
		synctest.Wait()
		if n := len(lost.renewals()); n != 1 {
			t.Fatalf("a lost key was renewed %d times, want once", n)
		}
		if n := len(kept.renewals()); n < 20 {
			t.Fatalf("a kept key was renewed %d times in ten leases beside a lost one, want 20 or more", n)
		}
		// a failing renewal is due again at once: tried every sixth of the lease
		if n := len(failing.renewals()); n < 50 {
			t.Fatalf("a failing renewal was tried %d times in ten leases, want every lease/6 from lease/3 on (55)", n)
		}
		r1.stop()
		r2.stop()
		r3.stop()
		time.Sleep(lease) // the renewer's goroutine ends at its next look
	})
}

// Claims taken and given back concurrently leave the renewer's list whole:
// every one stopped leaves it, and the list is empty once all are.
func TestRenewerListUnderConcurrency(t *testing.T) {
	h := &Handler{Lease: caddy.Duration(time.Hour), logger: zap.NewNop(), renewer: new(renewer)}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rns := make([]renewal, 200)
			for i := range rns {
				h.startRenewal(&rns[i], &renewCounter{}, time.Now())
				if i%3 == 2 {
					rns[i-1].stop()
				}
			}
			for i := range rns {
				rns[i].stop()
			}
		})
	}
	wg.Wait()
	h.renewer.mu.Lock()
	defer h.renewer.mu.Unlock()
	if h.renewer.first != nil || h.renewer.last != nil {
		t.Fatal("claims left in the renewer's list after every one stopped")
	}
}
