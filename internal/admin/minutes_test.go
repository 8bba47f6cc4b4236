package admin

import (
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/reconcile"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/series"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// countingRoute is a Route with the process's counts the test sets, and no
// series.
type countingRoute struct {
	source string
	mu     sync.Mutex
	counts map[string]int64
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

func (r *countingRoute) Series() *series.Recorder           { return nil }
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

// TestMinutesOf: the charts' four series sum the results counted in each
// step (refused: every refusal, whatever its result), and failed counts
// the inbox's failed attempts too (a source whose deliveries were retried
// and dead-lettered does not chart "failed 0"); the inbox's series are
// given only for a source with an inbox.
func TestMinutesOf(t *testing.T) {
	w := series.Windows[0]
	n := w.Steps()
	at := func(i int, v int64) []int64 {
		l := make([]int64, n)
		l[i] = v
		return l
	}
	nan := func() []float64 {
		l := make([]float64, n)
		for i := range l {
			l[i] = math.NaN()
		}
		return l
	}
	s := series.Series{
		From: time.Unix(0, 0), Step: time.Minute,
		Results: map[string][]int64{
			results.New: at(3, 2), results.Replayed: at(3, 1), results.InvalidSignature: at(4, 1),
			results.TooLarge: at(4, 2), results.Conflict: at(5, 1), results.Bypassed: at(5, 1),
			results.Forbidden: at(5, 1), results.Skipped: at(5, 7),
		},
		Delivered: at(6, 1), Retried: at(6, 6), DeadLettered: at(6, 1), Backlog: at(6, 3),
		Handled: series.Percentiles{P50: nan(), P99: nan()}, App: series.Percentiles{P50: nan(), P99: nan()},
		Lag: series.Percentiles{P50: nan(), P99: nan()},
	}
	m := minutesOf("src", w, s, true)
	if m.New[3] != 2 || m.Replayed[3] != 1 || m.Refused[4] != 3 || m.Refused[5] != 1 || m.Failed[5] != 2 || m.Failed[6] != 7 || m.StepSeconds != 60 || m.Window != "1h" {
		t.Fatalf("new %v replayed %v refused %v failed %v", m.New[:8], m.Replayed[:8], m.Refused[:8], m.Failed[:8])
	}
	if m.InboxRetried[6] != 6 || m.InboxDeadLettered[6] != 1 || m.InboxBacklog[6] != 3 || m.LagP50 == nil {
		t.Fatalf("inbox series: %+v", m)
	}
	b, err := json.Marshal(minutesOf("src", w, s, false))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"inbox_delivered", "inbox_retried", "inbox_dead_lettered", "inbox_backlog", "lag_p50_ms", "lag_p99_ms"} {
		if _, ok := raw[k]; ok {
			t.Errorf("%s for a source without an inbox", k)
		}
	}
}

// TestMillisJSON: a step that counted nothing is null, not 0 ms; a
// duration is written to the microsecond.
func TestMillisJSON(t *testing.T) {
	b, err := json.Marshal(millis{math.NaN(), 1.23456, 250})
	if err != nil || string(b) != "[null,1.235,250]" {
		t.Fatalf("%s %v", b, err)
	}
}

// TestResultSeries: each result is charted in its series; the refused
// ones are those docs/admin.md#refusals lists, every other failure is
// failed. Every result is named here: one added later is placed
// deliberately.
func TestResultSeries(t *testing.T) {
	want := map[string]int{results.New: seriesNew, results.Replayed: seriesReplayed,
		results.InvalidSignature: seriesRefused, results.Forbidden: seriesRefused, results.TooLarge: seriesRefused,
		results.Mismatch: seriesRefused, results.Ambiguous: seriesRefused, results.Loop: seriesRefused,
		results.OverBudget: seriesRefused, results.Unavailable: seriesRefused,
		results.Conflict: seriesFailed, results.Bypassed: seriesFailed, "a result added later": seriesFailed,
		results.Skipped: -1, results.Handshake: -1, results.Filtered: -1}
	for res, series := range want {
		if got := resultSeries(res); got != series {
			t.Errorf("%s: series %d, want %d", res, got, series)
		}
	}
	for _, res := range results.All {
		if _, ok := want[res]; !ok {
			t.Errorf("result %s: not in the test", res)
		}
	}
}
