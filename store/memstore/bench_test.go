package memstore

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Memory store benchmarks: what a stored key costs in live heap, and what
// Claim latency looks like while a million keys expire at once. Both ignore
// b.N's usual meaning: one iteration is one whole scenario, so run them with
// -benchtime 1x (a longer benchtime repeats the scenario).

// benchStoredKeys is the number of keys both benchmarks store, as in the
// issue's target and bench/load.sh.
const benchStoredKeys = 1_000_000

// benchRecordBody is the recorded body of every stored key: the 11-byte
// answer bench/load.sh's memory fill records.
var benchRecordBody = []byte(`{"ok":true}`)

// benchRecord returns a record built the way the handler's recorder builds
// it for bench/load.sh's memory fill (`respond` with a Content-Type, and the
// Server header Caddy adds): encoded into a buffer with 256 bytes of room
// beyond the announced Content-Length, then the body appended.
func benchRecord() []byte {
	hdr := http.Header{
		"Content-Type": {"application/json"},
		"Server":       {"Caddy"},
	}
	var hash [32]byte
	rec := record.Encode(make([]byte, 0, 256), http.StatusOK, hdr, &hash)
	return append(rec, benchRecordBody...)
}

// benchKey returns the i-th key in the shape and length the handler builds
// for bench/load.sh's memory fill, "idem:<source>:<prefix>-<pid>-<thread>-<counter>"
// (33 bytes for the 900,000 keys with a 6-digit counter).
func benchKey(buf *[]byte, prefix string, i int) string {
	b := append((*buf)[:0], "idem:bench-m:"...)
	b = append(b, prefix...)
	b = append(b, "-100000-0-"...)
	b = strconv.AppendInt(b, int64(i), 10)
	*buf = b
	return string(b)
}

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemoryStorePerKey stores benchStoredKeys completed keys through
// the Store API (Claim, then Complete with a fresh record each, TTL 1h) and
// reports the live heap they add: B/key in all, and overhead-B/key beyond
// the recorded body (the target: at most 256).
//
//	go test -run '^$' -bench MemoryStorePerKey -benchtime 1x ./store/memstore
func BenchmarkMemoryStorePerKey(b *testing.B) {
	ctx := context.Background()
	var perKey float64
	for range b.N {
		b.StopTimer()
		before := liveHeap()
		b.StartTimer()
		m := &Store{table: newMemoryTable(zap.NewNop())}
		m.table.setMaxEntries(2 * benchStoredKeys)
		var buf []byte
		for i := range benchStoredKeys {
			key := benchKey(&buf, "fill", i)
			owner := store.NewOwner()
			if res, err := m.Claim(ctx, key, owner, 30*time.Second); err != nil || res.State != store.StateClaimed {
				b.Fatalf("claim %d: %v, %v", i, res.State, err)
			}
			if err := m.Complete(ctx, key, owner, benchRecord(), time.Hour); err != nil {
				b.Fatalf("complete %d: %v", i, err)
			}
		}
		b.StopTimer()
		after := liveHeap()
		if n := m.table.len(); n != benchStoredKeys {
			b.Fatalf("table holds %d keys, want %d", n, benchStoredKeys)
		}
		runtime.KeepAlive(m)
		_ = m.table.Destruct()
		perKey = float64(int64(after)-int64(before)) / benchStoredKeys
		b.StartTimer()
	}
	b.ReportMetric(perKey, "B/key")
	b.ReportMetric(perKey-float64(len(benchRecordBody)), "overhead-B/key")
	b.ReportMetric(float64(len(benchRecord())), "record-B")
}

// BenchmarkMemoryStoreExpiry stores benchStoredKeys completed keys with a
// TTL of one minute, then moves the store's clock past that TTL so that all
// of them expire at once, and measures Claim latency (a Claim and a
// Complete of a new key, as a new delivery does) from GOMAXPROCS goroutines,
// each paced at about one delivery every 100 µs, while the janitor removes
// the expired keys. The same load is measured first for as long before the
// expiry (the janitor sweeping a full table that has nothing to remove), as
// the baseline. It reports p50, p99, p99.9 and max Claim latency of both
// phases, how many Claims took over a millisecond, the number of Claims
// measured, and how many keys were still held when the measurement ended
// (the keys the load itself stored, once the janitor has removed every
// expired one).
//
//	go test -run '^$' -bench MemoryStoreExpiry -benchtime 1x ./store/memstore
func BenchmarkMemoryStoreExpiry(b *testing.B) {
	const ttl = time.Minute
	// the package clock, shifted by offset; the janitor reads it too
	var offset atomic.Int64
	prevNow := now
	now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	b.Cleanup(func() { now = prevNow })

	ctx := context.Background()
	var steady, expiry []time.Duration
	var left int
	for range b.N {
		b.StopTimer()
		offset.Store(0)
		m := &Store{table: newMemoryTable(zap.NewNop())}
		m.table.setMaxEntries(2 * benchStoredKeys)
		var buf []byte
		for i := range benchStoredKeys {
			key := benchKey(&buf, "fill", i)
			owner := store.NewOwner()
			_, _ = m.Claim(ctx, key, owner, 30*time.Second)
			if err := m.Complete(ctx, key, owner, benchRecord(), ttl); err != nil {
				b.Fatalf("complete %d: %v", i, err)
			}
		}
		runtime.GC()
		b.StartTimer()

		// one full janitor pass of load before the expiry, one after
		window := memorySweepEvery + memorySweepEvery/4
		steady = append(steady, benchClaimLoad(b, m, "steady", window)...)
		offset.Store(int64(ttl + time.Second)) // every stored key is now expired
		expiry = append(expiry, benchClaimLoad(b, m, "expiry", window)...)

		b.StopTimer()
		left = m.table.len()
		_ = m.table.Destruct()
		b.StartTimer()
	}
	report := func(phase string, lat []time.Duration) {
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(lat[len(lat)/2]), phase+"-p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), phase+"-p99-ms")
		b.ReportMetric(ms(lat[len(lat)*999/1000]), phase+"-p99.9-ms")
		over := len(lat) - sort.Search(len(lat), func(i int) bool { return lat[i] > time.Millisecond })
		b.ReportMetric(float64(over)/float64(b.N), phase+"-over-1ms")
		b.ReportMetric(ms(lat[len(lat)-1]), phase+"-max-ms")
		b.ReportMetric(float64(len(lat))/float64(b.N), phase+"-claims")
	}
	report("steady", steady)
	report("expiry", expiry)
	b.ReportMetric(float64(left), "keys-left")
}

// benchClaimLoad runs paced new deliveries (Claim, then Complete) on
// GOMAXPROCS goroutines for d and returns every Claim's latency.
func benchClaimLoad(b *testing.B, m *Store, prefix string, d time.Duration) []time.Duration {
	ctx := context.Background()
	workers := runtime.GOMAXPROCS(0)
	lats := make([][]time.Duration, workers)
	rec := benchRecord()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var buf []byte
			for i := 0; time.Now().Before(deadline); i++ {
				key := benchKey(&buf, prefix+"-"+strconv.Itoa(w), i)
				owner := store.NewOwner()
				start := time.Now()
				res, err := m.Claim(ctx, key, owner, 30*time.Second)
				lats[w] = append(lats[w], time.Since(start))
				if err != nil || res.State != store.StateClaimed {
					b.Errorf("claim %s: %v, %v", key, res.State, err)
					return
				}
				if err := m.Complete(ctx, key, owner, rec, time.Hour); err != nil {
					b.Errorf("complete %s: %v", key, err)
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	return slices.Concat(lats...)
}

// BenchmarkMemoryStoreSweep stores benchStoredKeys completed keys, moves the
// store's clock past their TTL, then sweeps every shard as the janitor does
// (one after the other, here without the janitor's pause between shards)
// while another goroutine takes and releases the lock of the shard being
// swept every 20 µs, as a Claim on that shard would. It reports the time a
// shard's sweep takes and the longest the other goroutine waited for the
// lock: the longest a Claim can wait on the janitor.
//
//	go test -run '^$' -bench MemoryStoreSweep -benchtime 1x ./store/memstore
func BenchmarkMemoryStoreSweep(b *testing.B) {
	const ttl = time.Minute
	var offset atomic.Int64
	prevNow := now
	now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	b.Cleanup(func() { now = prevNow })

	var sweepSum, sweepMax, waitMax time.Duration
	for range b.N {
		b.StopTimer()
		offset.Store(0)
		// a table whose janitor never starts: the sweeps below are the only ones
		tbl := newMemoryTable(zap.NewNop())
		tbl.janitor.Do(func() { close(tbl.done) })
		tbl.setMaxEntries(2 * benchStoredKeys)
		var buf []byte
		for i := range benchStoredKeys {
			key := benchKey(&buf, "fill", i)
			owner := store.NewOwner()
			_ = tbl.claim(key, owner, 30*time.Second)
			if err := tbl.complete(key, owner, benchRecord(), ttl); err != nil {
				b.Fatalf("complete %d: %v", i, err)
			}
		}
		runtime.GC()
		offset.Store(int64(ttl + time.Second))
		b.StartTimer()

		for i := range tbl.shards {
			s := &tbl.shards[i]
			stop := make(chan struct{})
			waited := make(chan time.Duration)
			go func() {
				var longest time.Duration
				for {
					select {
					case <-stop:
						waited <- longest
						return
					default:
					}
					start := time.Now()
					s.mu.Lock()
					longest = max(longest, time.Since(start))
					s.mu.Unlock()
					time.Sleep(20 * time.Microsecond)
				}
			}()
			start := time.Now()
			tbl.sweep(s)
			d := time.Since(start)
			close(stop)
			waitMax = max(waitMax, <-waited)
			sweepSum += d
			sweepMax = max(sweepMax, d)
		}

		b.StopTimer()
		if n := tbl.len(); n != 0 {
			b.Fatalf("%d keys left after sweeping every shard, want 0", n)
		}
		_ = tbl.Destruct()
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(sweepSum)/float64(b.N*memoryShards), "sweep-mean-ms/shard")
	b.ReportMetric(ms(sweepMax), "sweep-max-ms/shard")
	b.ReportMetric(ms(waitMax), "lock-wait-max-ms")
}
