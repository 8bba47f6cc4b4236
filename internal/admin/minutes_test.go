package admin

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// countingRoute is a Route whose results the test sets.
type countingRoute struct {
	source string
	mu     sync.Mutex
	counts map[string]int64
}

func (r *countingRoute) add(result string, n int64) {
	r.mu.Lock()
	r.counts[result] += n
	r.mu.Unlock()
}

func (r *countingRoute) Results() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

func (r *countingRoute) Source() string                     { return r.source }
func (r *countingRoute) Store() store.Store                 { return nil }
func (r *countingRoute) StoreModule() string                { return "memory" }
func (r *countingRoute) KeyPrefix() string                  { return "idem:" + r.source + ":" }
func (r *countingRoute) TTL() time.Duration                 { return time.Hour }
func (r *countingRoute) Forwarder() *forward.Forwarder      { return nil }
func (r *countingRoute) Reconciler() *reconcile.Reconciler  { return nil }
func (r *countingRoute) Refusals() *archive.Archive         { return nil }
func (r *countingRoute) Inbox() *inbox.Inbox                { return nil }
func (r *countingRoute) Archive() *archive.Archive          { return nil }
func (r *countingRoute) AllowLists() []any                  { return nil }
func (r *countingRoute) Guards() bool                       { return false }
func (r *countingRoute) Guard(string, store.KeyInfo) string { return "" }

// TestMinutesRing: counts land in the minute they were read in, a minute
// older than the hour leaves the answer, and the ring's slot of an old
// minute is reused without its counts.
func TestMinutesRing(t *testing.T) {
	rt := &countingRoute{source: fmt.Sprintf("minutes_ring_%d", time.Now().UnixNano()), counts: map[string]int64{}}
	owner := new(int)
	Publish(owner, []Route{rt}, Settings{})
	t.Cleanup(func() { Withdraw(owner) })
	src := rt.source
	t0 := time.Now().Add(24 * time.Hour).Truncate(time.Minute)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	rt.add(results.New, 3)
	sampleMinutes(at(0)) // what came before is in t0's minute
	base := minutesOf(src, at(0))
	if last := len(base.New) - 1; base.New[last] != 3 {
		t.Fatalf("first read: new %v", base.New[last-2:])
	}
	rt.add(results.New, 2)
	sampleMinutes(at(10 * time.Second))
	rt.add(results.Replayed, 1)
	sampleMinutes(at(90 * time.Second))

	m := minutesOf(src, at(2*time.Minute))
	last := len(m.New) - 1
	if m.New[last-2] != 5 || m.Replayed[last-1] != 1 || m.New[last-1] != 0 || sumOf(m.Replayed) != 1 {
		t.Fatalf("new %v, replayed %v", m.New[50:], m.Replayed[50:])
	}
	// an hour later the first minute is out of the window, and its slot
	// (the same one) is reused for the new minute without its counts
	rt.add(results.New, 1)
	sampleMinutes(at(time.Hour + 5*time.Second))
	m = minutesOf(src, at(time.Hour+10*time.Second))
	if sumOf(m.New) != 1 || m.New[len(m.New)-1] != 1 || sumOf(m.Replayed) != 1 {
		t.Fatalf("an hour later: new %v, replayed %v", m.New, m.Replayed)
	}
	if m := minutesOf(src, at(3*time.Hour)); sumOf(m.New)+sumOf(m.Replayed) != 0 {
		t.Fatalf("hours later: %+v", m)
	}
}

// TestResultSeries: each result is charted in its series.
func TestResultSeries(t *testing.T) {
	for res, want := range map[string]int{results.New: seriesNew, results.Replayed: seriesReplayed, results.InvalidSignature: seriesInvalid,
		results.Conflict: seriesFailed, results.Mismatch: seriesFailed, results.TooLarge: seriesFailed, results.Bypassed: seriesFailed,
		results.Unavailable: seriesFailed, results.Skipped: -1, results.Handshake: -1} {
		if got := resultSeries(res); got != want {
			t.Errorf("%s: series %d, want %d", res, got, want)
		}
	}
}

func sumOf(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}
