package series

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

var (
	iNew      = results.Index(results.New)
	iReplayed = results.Index(results.Replayed)
)

// TestBuckets: every duration from 8 µs to six days is read back from its
// bucket within 12.5 %, buckets grow with the duration, and a quantile is
// the bucket its rank falls in.
func TestBuckets(t *testing.T) {
	prev := 0
	for d := 8 * time.Microsecond; d < 6*24*time.Hour; d += d/7 + time.Microsecond {
		b := bucketOf(d)
		if b < prev || b >= numBuckets {
			t.Fatalf("%v: bucket %d after %d", d, b, prev)
		}
		prev = b
		ms := float64(d) / float64(time.Millisecond)
		if got := bucketMiddle(b); math.Abs(got-ms)/ms > 0.125 {
			t.Fatalf("%v: read back as %.4fms", d, got)
		}
	}
	if bucketOf(0) != 0 || bucketOf(7*time.Microsecond) != 0 || bucketOf(30*24*time.Hour) != numBuckets-1 {
		t.Fatal("the ends of the scale")
	}
	var h [numBuckets]int64
	if !math.IsNaN(quantile(&h, 0.5)) {
		t.Fatal("the quantile of nothing")
	}
	h[bucketOf(2*time.Millisecond)] = 98
	h[bucketOf(300*time.Millisecond)] = 2
	if p50, p99 := quantile(&h, 0.5), quantile(&h, 0.99); math.Abs(p50-2) > 0.25 || math.Abs(p99-300) > 37.5 {
		t.Fatalf("p50 %v, p99 %v", p50, p99)
	}
}

// fakeBackend keeps a table as the memory store does, counts its writes
// and fails them while fail is set.
type fakeBackend struct {
	mu    sync.Mutex
	table *memoryTable
	adds  int
	fail  bool
}

func newFake() *fakeBackend {
	return &fakeBackend{table: &memoryTable{m: map[string][]byte{}, pruned: map[byte]string{}}}
}

func (f *fakeBackend) add(_ context.Context, w *write) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("store down")
	}
	f.adds++
	return applyWrite(f.table, w)
}

func (f *fakeBackend) buckets(_ context.Context, t tier, first, last int64) (map[int64]fields, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return readBuckets(f.table, t, first, last), nil
}

func (f *fakeBackend) totals(context.Context) (fields, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return currentTotals(f.table.get(totalsKey), time.Now()), nil
}

func (f *fakeBackend) timeout() time.Duration { return time.Second }
func (f *fakeBackend) close()                 {}

func (f *fakeBackend) writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.adds
}

// TestFlushOncePerSecond: however many requests are counted, the store is
// written at most once a second, and nothing when nothing was counted;
// closing writes what is left, and every count arrives.
func TestFlushOncePerSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newFake()
		r := newRecorder("cadence", b, zap.NewNop())
		for range 3500 {
			r.Result(iNew)
			r.Handled(time.Millisecond)
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		if n := b.writes(); n < 3 || n > 4 {
			t.Fatalf("%d writes for 3.5 s of requests, want 3 or 4", n)
		}
		time.Sleep(5 * time.Second) // idle: nothing to write
		synctest.Wait()
		idle := b.writes()
		if idle > 4 {
			t.Fatalf("%d writes after 5 idle seconds", idle)
		}
		r.Result(iNew)
		r.close()
		tot, err := r.Totals(t.Context())
		if err != nil || tot.Results[results.New] != 3501 || b.writes() != idle+1 {
			t.Fatalf("totals %v (%v) after %d writes", tot.Results, err, b.writes())
		}
	})
}

// TestFlushFailureKeepsCounts: a write that fails keeps what it held for
// the next one, and the highest backlog with it; a read meanwhile shows
// the counts, from memory.
func TestFlushFailureKeepsCounts(t *testing.T) {
	b := newFake()
	r := manualRecorder(b)
	at := time.Now().Truncate(time.Minute)
	r.Result(iNew)
	r.Backlog(9)
	b.fail = true
	r.flush(at)
	r.Result(iNew)
	if s, err := r.Read(t.Context(), Windows[0], at); err != nil || sumOf(s.Results[results.New]) != 2 || s.Backlog[59] != 9 {
		t.Fatalf("read during the outage: %v %v", s.Results, err)
	}
	b.fail = false
	r.flush(at.Add(time.Second))
	if b.writes() != 1 {
		t.Fatalf("%d writes", b.writes())
	}
	s, err := r.Read(t.Context(), Windows[0], at.Add(2*time.Second))
	if err != nil || sumOf(s.Results[results.New]) != 2 || s.Backlog[59] != 9 {
		t.Fatalf("after the outage: %v %v %v", s.Results, s.Backlog[59], err)
	}
}

// manualRecorder is a recorder whose flushes the test makes.
func manualRecorder(b backend) *Recorder {
	r := &Recorder{source: "manual", b: b, logger: zap.NewNop(), stop: make(chan struct{}), done: make(chan struct{})}
	r.live.backlog.Store(-1)
	close(r.done)
	return r
}

func sumOf(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// openFile provisions a file store at path.
func openFile(t *testing.T, path string) *filestore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cleanup(); cancel() })
	return s
}

// openRedis provisions a redis store on addr.
func openRedis(t testing.TB, addr string) *redisstore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &redisstore.Store{Addresses: []string{addr}, Timeout: caddy.Duration(5 * time.Second)}
	if err := s.Provision(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cleanup(); cancel() })
	return s
}

// TestStores: on each store, a flush lands in the buckets of its minute
// and of its hour and in the totals; each window reads its steps from
// them, with the percentiles of the merged buckets and the highest
// backlog; what is not flushed yet is read once, before and after its
// flush.
func TestStores(t *testing.T) {
	srv := testkit.StartRedis(t)
	for name, open := range map[string]func(t *testing.T) backend{
		"memory": func(t *testing.T) backend {
			return newMemoryBackend()
		},
		"file": func(t *testing.T) backend {
			b, err := newFileBackend(openFile(t, filepath.Join(t.TempDir(), "store.db")).File(), "stores")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"redis": func(t *testing.T) backend {
			b, err := newRedisBackend(openRedis(t, srv.Addr()).Streams(), "stores")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			r := manualRecorder(b)
			defer r.close()
			// an hour and a half into the day before yesterday
			t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-48*time.Hour + 90*time.Minute + 30*time.Second)
			for range 3 {
				r.Result(iNew)
				r.Handled(2 * time.Millisecond)
				r.App(time.Millisecond)
			}
			r.Result(iReplayed)
			r.Handled(200 * time.Millisecond)
			r.Delivered(5 * time.Second)
			r.Retried()
			r.Retried()
			r.DeadLettered()
			r.Backlog(7)
			r.Backlog(3)
			r.flush(t0)
			r.Result(iNew)
			r.Result(iNew)
			r.Backlog(2)
			r.flush(t0.Add(time.Minute))

			now := t0.Add(2 * time.Minute)
			s, err := r.Read(t.Context(), Windows[0], now)
			if err != nil {
				t.Fatal(err)
			}
			if !s.From.Equal(now.Truncate(time.Minute).Add(-59*time.Minute)) || s.Step != time.Minute || len(s.Delivered) != 60 {
				t.Fatalf("from %v, step %v, %d steps", s.From, s.Step, len(s.Delivered))
			}
			nw := s.Results[results.New]
			if nw[57] != 3 || nw[58] != 2 || sumOf(nw) != 5 || s.Results[results.Replayed][57] != 1 || len(s.Results) != 2 {
				t.Fatalf("results %v", s.Results)
			}
			if s.Delivered[57] != 1 || s.Retried[57] != 2 || s.DeadLettered[57] != 1 || s.Backlog[57] != 7 || s.Backlog[58] != 2 {
				t.Fatalf("inbox: %v %v %v %v", s.Delivered[57], s.Retried[57], s.DeadLettered[57], s.Backlog[55:])
			}
			near := func(got, want float64) bool { return math.Abs(got-want)/want <= 0.125 }
			if !near(s.Handled.P50[57], 2) || !near(s.Handled.P99[57], 200) || !near(s.App.P99[57], 1) || !near(s.Lag.P50[57], 5000) || !math.IsNaN(s.Handled.P50[58]) {
				t.Fatalf("percentiles: handled %v/%v, app %v, lag %v, then %v", s.Handled.P50[57], s.Handled.P99[57], s.App.P99[57], s.Lag.P50[57], s.Handled.P50[58])
			}

			day, err := r.Read(t.Context(), Windows[1], now)
			if err != nil {
				t.Fatal(err)
			}
			if len(day.Delivered) != 288 || day.Step != 5*time.Minute || day.Results[results.New][287] != 5 || day.Backlog[287] != 7 || !near(day.Handled.P99[287], 200) {
				t.Fatalf("24h: %d steps of %v, new %v, backlog %v", len(day.Delivered), day.Step, day.Results[results.New][280:], day.Backlog[287])
			}
			week, err := r.Read(t.Context(), Windows[2], now)
			if err != nil {
				t.Fatal(err)
			}
			if len(week.Delivered) != 168 || week.Step != time.Hour || week.Results[results.New][167] != 5 || week.Retried[167] != 2 || !near(week.Handled.P50[167], 2) {
				t.Fatalf("7d: %d steps of %v, new %v", len(week.Delivered), week.Step, week.Results[results.New][160:])
			}

			tot, err := r.Totals(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tot.Results[results.New] != 5 || tot.Results[results.Conflict] != 0 || len(tot.Results) != len(results.All) ||
				tot.Deliveries[DeadLettered] != 1 || !tot.Since.Equal(t0.Truncate(time.Second)) {
				t.Fatalf("totals %v %v since %v", tot.Results, tot.Deliveries, tot.Since)
			}

			// counted, not flushed: read once, before the flush and after
			r.Result(iNew)
			for i, at := range []time.Time{now, now.Add(time.Second)} {
				if i == 1 {
					r.flush(now)
				}
				s, err := r.Read(t.Context(), Windows[0], at)
				if err != nil || sumOf(s.Results[results.New]) != 6 {
					t.Fatalf("read %d: %v %v", i, s.Results, err)
				}
				if tot, _ := r.Totals(t.Context()); tot.Results[results.New] != 6 {
					t.Fatalf("totals %d: %v", i, tot.Results)
				}
			}
		})
	}
}

// TestStoresPrune: the file and memory stores drop a minute's bucket a
// day after it (25 h), an hour's after a week (8 days), and forget the
// totals of a source idle for 30 days.
func TestStoresPrune(t *testing.T) {
	for name, b := range map[string]backend{
		"memory": newMemoryBackend(),
		"file": func() backend {
			b, err := newFileBackend(openFile(t, filepath.Join(t.TempDir(), "store.db")).File(), "prune")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			defer b.close()
			t0 := time.Now().Add(-40 * 24 * time.Hour).Truncate(time.Hour)
			one := &write{counts: []field{{results.New, 1}}}
			has := func(tr tier, at time.Time) bool {
				bs, err := b.buckets(t.Context(), tr, tr.unitOf(at), tr.unitOf(at))
				if err != nil {
					t.Fatal(err)
				}
				return bs[tr.unitOf(at)] != nil
			}
			for _, step := range []struct {
				at               time.Duration
				minute, hour     bool // t0's buckets kept
				totalsNew, since int64
			}{
				{0, true, true, 1, 0},
				{24 * time.Hour, true, true, 2, 0},
				{26 * time.Hour, false, true, 3, 0},
				{8*24*time.Hour + 2*time.Hour, false, false, 4, 0},
			} {
				one.at = t0.Add(step.at)
				if err := b.add(t.Context(), one); err != nil {
					t.Fatal(err)
				}
				if has(minutes, t0) != step.minute || has(hours, t0) != step.hour {
					t.Fatalf("after %v: t0's minute kept %v, hour %v", step.at, has(minutes, t0), has(hours, t0))
				}
			}
			// the totals were last added to 31 days ago
			if tot, err := b.totals(t.Context()); err != nil || len(tot) != 0 {
				t.Fatalf("stale totals: %v %v", tot, err)
			}
			one.at = time.Now()
			if err := b.add(t.Context(), one); err != nil {
				t.Fatal(err)
			}
			if tot, _ := b.totals(t.Context()); tot[results.New] != 1 || tot[fieldSince] != one.at.Unix() {
				t.Fatalf("totals counted again: %v", tot)
			}
		})
	}
}

// TestRedisInstancesAddUp: two instances on one Redis add their counts
// and histograms up, the higher backlog wins, and every key a flush
// writes expires: a minute's after 25 hours, an hour's after 8 days, the
// totals after 30 days.
func TestRedisInstancesAddUp(t *testing.T) {
	srv := testkit.StartRedis(t)
	var rs []*Recorder
	for range 2 {
		b, err := newRedisBackend(openRedis(t, srv.Addr()).Streams(), "shared")
		if err != nil {
			t.Fatal(err)
		}
		r := manualRecorder(b)
		t.Cleanup(r.close)
		rs = append(rs, r)
	}
	at := time.Now()
	for i, r := range rs {
		for range 3 + i {
			r.Result(iNew)
			r.Handled(time.Duration(1+9*i) * time.Millisecond)
		}
		r.Backlog(int64(10 - 5*i))
		r.flush(at)
	}
	s, err := rs[1].Read(t.Context(), Windows[0], at)
	if err != nil {
		t.Fatal(err)
	}
	if s.Results[results.New][59] != 7 || s.Backlog[59] != 10 || math.Abs(s.Handled.P99[59]-10) > 1.25 || math.Abs(s.Handled.P50[59]-10) > 1.25 {
		t.Fatalf("new %d, backlog %d, handled p50 %v p99 %v", s.Results[results.New][59], s.Backlog[59], s.Handled.P50[59], s.Handled.P99[59])
	}
	rc := srv.Client(t)
	b := rs[0].b.(*redisBackend)
	for key, want := range map[string]time.Duration{
		b.key(minutes, minutes.unitOf(at)): 25 * time.Hour,
		b.key(hours, hours.unitOf(at)):     8 * 24 * time.Hour,
		b.prefix:                           30 * 24 * time.Hour,
	} {
		if ttl := rc.PTTL(t.Context(), key).Val(); ttl > want || ttl < want-time.Minute {
			t.Errorf("%s: ttl %v, want %v", key, ttl, want)
		}
	}
}

// BenchmarkRecord is what a request adds on its path: its result, its
// handling time and the application's, into counters in memory.
func BenchmarkRecord(b *testing.B) {
	r := manualRecorder(newFake())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		d := 3 * time.Millisecond
		for pb.Next() {
			r.Result(iNew)
			r.App(d)
			r.Handled(d)
		}
	})
}

// TestUseShared: the routes of a source on one store, and the
// configurations a reload replaces, share one recorder: what is counted
// after the first use is given back (a request of the old configuration
// that ends after the reload) is still written, by the last.
func TestUseShared(t *testing.T) {
	s := openFile(t, filepath.Join(t.TempDir(), "store.db"))
	r1, done1, err := Use("shared", s, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	r2, done2, err := Use("shared", s, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if r1 != r2 {
		t.Fatal("two uses of a source on one store have two recorders")
	}
	done1()
	r1.Result(iNew)
	r1.Result(iNew)
	done2() // the last use: what is left is written
	r3, done3, err := Use("shared", s, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer done3()
	if r3 == r1 {
		t.Fatal("a recorder outlived its last use")
	}
	if tot, err := r3.Totals(t.Context()); err != nil || tot.Results[results.New] != 2 {
		t.Fatalf("totals %v %v", tot.Results, err)
	}
}
