package series

import (
	"context"
	"math"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
)

// Window is a span of time read as a series of steps, each the sum of the
// buckets in it.
type Window struct {
	Name string // as the admin API names it: 1h, 24h, 7d
	Span time.Duration
	Step time.Duration
	tier tier
}

// Windows are the spans a series is read over: the last hour a minute at
// a time, the last day five minutes at a time, the last week an hour at a
// time.
var Windows = [...]Window{
	{"1h", time.Hour, time.Minute, minutes},
	{"24h", 24 * time.Hour, 5 * time.Minute, minutes},
	{"7d", 7 * 24 * time.Hour, time.Hour, hours},
}

// WindowNamed returns the window of a name.
func WindowNamed(name string) (Window, bool) {
	for _, w := range Windows {
		if w.Name == name {
			return w, true
		}
	}
	return Window{}, false
}

// Steps is the number of steps of the window.
func (w Window) Steps() int { return int(w.Span / w.Step) }

// Series is a source's window, a value per step, oldest first, the last
// step the one now is in (still counting).
type Series struct {
	From time.Time // the start of the first step
	Step time.Duration
	// Results are the requests by result, each result counted in the
	// window.
	Results map[string][]int64
	// The inbox's deliveries by outcome, and its highest backlog.
	Delivered, Retried, DeadLettered, Backlog []int64
	// The 50th and 99th percentiles of the handling time, of the
	// application's answers and of the inbox's delivery lag, in
	// milliseconds; NaN for a step that counted none.
	Handled, App, Lag Percentiles
}

// Percentiles are a duration's 50th and 99th percentiles per step.
type Percentiles struct{ P50, P99 []float64 }

// Read returns the source's series over a window ending now: what the
// store holds, and what this recorder counted since its last flush. A nil
// Recorder reads a series that counted nothing.
func (r *Recorder) Read(ctx context.Context, w Window, now time.Time) (Series, error) {
	stepSecs, unitSecs := int64(w.Step/time.Second), int64(w.tier.unit/time.Second)
	steps := w.Steps()
	firstStep := now.Unix()/stepSecs - int64(steps) + 1
	first, last := firstStep*stepSecs/unitSecs, w.tier.unitOf(now)
	bs := map[int64]fields{}
	if r != nil {
		var err error
		if bs, err = r.buckets(ctx, w.tier, first, last, now); err != nil {
			return Series{}, err
		}
	}

	s := Series{
		From: time.Unix(firstStep*stepSecs, 0).UTC(), Step: w.Step,
		Results:   map[string][]int64{},
		Delivered: make([]int64, steps), Retried: make([]int64, steps), DeadLettered: make([]int64, steps),
		Backlog: make([]int64, steps),
		Handled: newPercentiles(steps), App: newPercentiles(steps), Lag: newPercentiles(steps),
	}
	perStep := stepSecs / unitSecs
	var hist [numHists][numBuckets]int64
	for i := range steps {
		hist = [numHists][numBuckets]int64{}
		for u := first + int64(i)*perStep; u < first+int64(i+1)*perStep; u++ {
			for name, v := range bs[u] {
				s.add(i, name, v, &hist)
			}
		}
		for h, p := range [numHists]*Percentiles{&s.Handled, &s.App, &s.Lag} {
			p.P50[i], p.P99[i] = quantile(&hist[h], 0.5), quantile(&hist[h], 0.99)
		}
	}
	return s, nil
}

// buckets reads a tier's buckets from unit first to last, the last with
// what this recorder counted since its last flush.
func (r *Recorder) buckets(ctx context.Context, t tier, first, last int64, now time.Time) (map[int64]fields, error) {
	ctx, cancel := context.WithTimeout(ctx, r.b.timeout())
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	bs, err := r.b.buckets(ctx, t, first, last)
	if err != nil {
		return nil, err
	}
	if bs == nil {
		bs = map[int64]fields{}
	}
	if bs[last] == nil {
		bs[last] = fields{}
	}
	bs[last].apply(r.pendingLocked(now), true)
	return bs, nil
}

// add adds a bucket's field to step i.
func (s *Series) add(i int, name string, v int64, hist *[numHists][numBuckets]int64) {
	switch name {
	case Delivered:
		s.Delivered[i] += v
	case Retried:
		s.Retried[i] += v
	case DeadLettered:
		s.DeadLettered[i] += v
	case fieldBacklog:
		s.Backlog[i] = max(s.Backlog[i], v)
	default:
		if h, b, ok := parseBucket(name); ok {
			hist[h][b] += v
			return
		}
		if results.Index(name) < 0 || v == 0 {
			return
		}
		l := s.Results[name]
		if l == nil {
			l = make([]int64, len(s.Delivered))
			s.Results[name] = l
		}
		l[i] += v
	}
}

func newPercentiles(n int) Percentiles {
	p := Percentiles{P50: make([]float64, n), P99: make([]float64, n)}
	for i := range n {
		p.P50[i], p.P99[i] = math.NaN(), math.NaN()
	}
	return p
}

// Totals are a source's counts since Since: requests by result (every
// result, 0 when none) and inbox deliveries by outcome.
type Totals struct {
	Results    map[string]int64
	Deliveries map[string]int64 // delivered, retried, dead_lettered
	// Since is when the counting began: the first count after the source
	// was idle for 30 days or more. Zero when nothing was counted.
	Since time.Time
}

// Totals returns the source's counts: what the store holds, and what this
// recorder counted since its last flush. A nil Recorder counted nothing.
func (r *Recorder) Totals(ctx context.Context) (Totals, error) {
	now := time.Now()
	f, unflushed := fields{}, false
	if r != nil {
		var err error
		if f, unflushed, err = r.totals(ctx, now); err != nil {
			return Totals{}, err
		}
	}
	t := Totals{Results: make(map[string]int64, len(results.All)), Deliveries: make(map[string]int64, 3)}
	for _, res := range results.All {
		t.Results[res] = f[res]
	}
	for _, o := range counterNames[len(results.All):] {
		t.Deliveries[o] = f[o]
	}
	switch {
	case f[fieldSince] > 0:
		t.Since = time.Unix(f[fieldSince], 0).UTC()
	case unflushed: // counted, not flushed yet
		t.Since = now.UTC().Truncate(time.Second)
	}
	return t, nil
}

// totals reads the totals, with what this recorder counted since its last
// flush, and whether it counted anything since.
func (r *Recorder) totals(ctx context.Context, now time.Time) (f fields, unflushed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.b.timeout())
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, err = r.b.totals(ctx); err != nil {
		return nil, false, err
	}
	if f == nil {
		f = fields{}
	}
	pending := r.pendingLocked(now)
	f.apply(pending, false)
	return f, len(pending.counts) > 0, nil
}

// pendingLocked is what the recorder counted since its last flush, as a
// write at now. Called with r.mu held.
func (r *Recorder) pendingLocked(now time.Time) *write {
	var cur counts
	r.live.load(&cur)
	return r.delta(&cur, r.live.backlog.Load(), now)
}
