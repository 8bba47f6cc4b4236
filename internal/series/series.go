// Package series keeps each source's counts and its series of a minute
// and of an hour in the route's store (docs/admin.md#minutes,
// docs/operating.md#counts-and-series): requests by result, inbox
// deliveries by outcome, the inbox's backlog, and histograms of the
// handling time, of the application's answers and of the inbox's delivery
// lag. The request path adds to counters in memory; a flush once a second
// writes what they gained to the store in one write (a Lua script on
// Redis, a transaction on the file store), never on the request path.
// Instances that share a Redis add up in it; the file store keeps them
// across restarts; the memory store (and a store of another module)
// keeps them in the process, across reloads.
package series

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// flushEvery is how often a recorder writes what it counted.
const flushEvery = time.Second

// tier is a size of bucket: a minute, kept for a day, or an hour, kept for
// a week (each with an hour's margin and more).
type tier struct {
	tag  byte // in the bucket's key
	unit time.Duration
	keep time.Duration
}

var (
	minutes = tier{'m', time.Minute, 25 * time.Hour}
	hours   = tier{'h', time.Hour, 8 * 24 * time.Hour}
	tiers   = [...]tier{minutes, hours}
)

// totalsKeep is how long a source's totals are kept after they were last
// added to: a source idle that long starts counting again.
const totalsKeep = 30 * 24 * time.Hour

// unitOf is the number of the bucket at holds: Unix minutes or hours.
func (t tier) unitOf(at time.Time) int64 { return at.Unix() / int64(t.unit/time.Second) }

// backend is a store's side of the series.
type backend interface {
	// add writes w in one write.
	add(ctx context.Context, w *write) error
	// buckets returns a tier's buckets from unit first to last, by unit;
	// a bucket nothing was written to is absent.
	buckets(ctx context.Context, t tier, first, last int64) (map[int64]fields, error)
	// totals returns the source's totals, empty when it has none.
	totals(ctx context.Context) (fields, error)
	// timeout bounds one call.
	timeout() time.Duration
	// close releases what the backend holds of its store.
	close()
}

// Recorder is a source's counts on a store, shared by its routes (Use):
// what the request path and the inbox add, written to the store once a
// second, and what is read back.
type Recorder struct {
	source string
	b      backend
	logger *zap.Logger
	live   live

	mu      sync.Mutex // flushes and reads, so that a read counts what is unflushed once
	flushed counts     // what the store has of live
	cur     counts     // a flush's scratch
	warned  time.Time  // the last failed flush logged

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// live are the counters the request path and the inbox add to: the
// counters and histograms only grow; backlog is the highest backlog seen
// since the last flush, -1 when none was.
type live struct {
	n       [numCounters]atomic.Int64
	hist    [numHists][numBuckets]atomic.Int64
	backlog atomic.Int64
}

// counts is a copy of live's counters and histograms.
type counts struct {
	n    [numCounters]int64
	hist [numHists][numBuckets]int64
}

func (l *live) load(c *counts) {
	for i := range l.n {
		c.n[i] = l.n[i].Load()
	}
	for h := range l.hist {
		for b := range l.hist[h] {
			c.hist[h][b] = l.hist[h][b].Load()
		}
	}
}

// raiseBacklog makes backlog at least n.
func (l *live) raiseBacklog(n int64) {
	for {
		cur := l.backlog.Load()
		if n <= cur || l.backlog.CompareAndSwap(cur, n) {
			return
		}
	}
}

// recorders shares each source's recorder on a store among the routes
// that have it and across config reloads: a request of the old
// configuration that ends after the new one took over is still counted
// and written.
var recorders = caddy.NewUsagePool()

// Use returns the recorder of a source on a store, made and started by
// its first user: a hash per bucket on the redis store, a bucket of the
// file store's file, and in the process for any other store. release
// gives the caller's use back; the last one writes what is left and
// stops the flushes.
func Use(source string, s store.Store, logger *zap.Logger) (r *Recorder, release func(), err error) {
	var key string
	var open func() (backend, error)
	switch s := s.(type) {
	case *redisstore.Store:
		st := s.Streams()
		client, done, err := st.Client()
		if err != nil {
			return nil, nil, err
		}
		done() // the client is the key: the recorder holds its own reference
		key = fmt.Sprintf("redis\x00%p\x00%s", client, st.SourceTag(source, ""))
		open = func() (backend, error) { return newRedisBackend(st, source) }
	case *filestore.Store:
		f := s.File()
		key = "file\x00" + f.Path() + "\x00" + source
		open = func() (backend, error) { return newFileBackend(f, source) }
	default:
		key = "memory\x00" + source
		open = func() (backend, error) { return newMemoryBackend(), nil }
	}
	v, _, err := recorders.LoadOrNew(key, func() (caddy.Destructor, error) {
		b, err := open()
		if err != nil {
			return nil, err
		}
		return newRecorder(source, b, logger), nil
	})
	if err != nil {
		return nil, nil, err
	}
	ref := usage.NewRef(recorders, key)
	return v.(*Recorder), func() { _ = ref.Release() }, nil
}

// Destruct implements caddy.Destructor: the last use is given back.
func (r *Recorder) Destruct() error {
	r.close()
	return nil
}

// newRecorder starts the flushes of a recorder on b.
func newRecorder(source string, b backend, logger *zap.Logger) *Recorder {
	r := &Recorder{source: source, b: b, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	r.live.backlog.Store(-1)
	go r.run(flushEvery)
	return r
}

// The counting methods may be called on a nil Recorder, which counts
// nothing.

// Result counts a request's result, by its index in results.All.
func (r *Recorder) Result(i int) {
	if r != nil {
		r.live.n[i].Add(1)
	}
}

// Handled counts a request's handling time, from its arrival to its
// answer.
func (r *Recorder) Handled(d time.Duration) {
	if r != nil {
		r.live.hist[histHandled][bucketOf(d)].Add(1)
	}
}

// App counts the time the application took to answer the handler or an
// inbox delivery.
func (r *Recorder) App(d time.Duration) {
	if r != nil {
		r.live.hist[histApp][bucketOf(d)].Add(1)
	}
}

// Delivered counts an inbox event delivered, lag after its acceptance
// (0 when unknown: not counted in the lag).
func (r *Recorder) Delivered(lag time.Duration) {
	if r == nil {
		return
	}
	r.live.n[delivered].Add(1)
	if lag > 0 {
		r.live.hist[histLag][bucketOf(lag)].Add(1)
	}
}

// Retried counts an inbox delivery that failed and is retried.
func (r *Recorder) Retried() {
	if r != nil {
		r.live.n[retried].Add(1)
	}
}

// DeadLettered counts an inbox event dead-lettered.
func (r *Recorder) DeadLettered() {
	if r != nil {
		r.live.n[deadLetter].Add(1)
	}
}

// Backlog notes the inbox's backlog (its events pending and scheduled), as
// read now; each bucket keeps the highest.
func (r *Recorder) Backlog(n int64) {
	if r != nil {
		r.live.raiseBacklog(n)
	}
}

// run flushes every interval until close.
func (r *Recorder) run(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.flush(time.Now())
		}
	}
}

// close stops the flushes, writes what is left and releases the store.
func (r *Recorder) close() {
	r.closeOnce.Do(func() {
		close(r.stop)
		<-r.done
		r.flush(time.Now())
		r.b.close()
	})
}

// flush writes what the counters gained since the last flush, in one
// store write; a write that fails is tried again, with what came since, at
// the next flush.
func (r *Recorder) flush(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live.load(&r.cur)
	high := r.live.backlog.Swap(-1)
	w := r.delta(&r.cur, high, now)
	if w.empty() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.b.timeout())
	err := r.b.add(ctx, w)
	cancel()
	if err != nil {
		r.live.raiseBacklog(high)
		if now.Sub(r.warned) >= time.Minute {
			r.warned = now
			r.logger.Warn("writing the source's counts and series to the store failed; they are kept in memory and written with the next flush that succeeds",
				zap.String("source", r.source), zap.Error(err))
		}
		return
	}
	r.flushed = r.cur
}

// delta is the write of what cur counts beyond what was flushed, and of
// the highest backlog (-1 for none). Called with r.mu held.
func (r *Recorder) delta(cur *counts, high int64, at time.Time) *write {
	w := &write{at: at}
	for i, v := range cur.n {
		if d := v - r.flushed.n[i]; d != 0 {
			w.counts = append(w.counts, field{counterNames[i], d})
		}
	}
	for h := range cur.hist {
		for b, v := range cur.hist[h] {
			if d := v - r.flushed.hist[h][b]; d != 0 {
				w.buckets = append(w.buckets, field{bucketNames[h][b], d})
			}
		}
	}
	if high > 0 {
		w.highs = append(w.highs, field{fieldBacklog, high})
	}
	return w
}
