package series

import (
	"context"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// countingBackend counts the writes a recorder makes to its backend.
type countingBackend struct {
	backend
	adds atomic.Int64
}

func (c *countingBackend) add(ctx context.Context, w *write) error {
	c.adds.Add(1)
	return c.backend.add(ctx, w)
}

// BenchmarkRecordWrites is BenchmarkRecord (a request's result, its
// handling time and the application's, from 16 senders per CPU at once)
// with a recorder that flushes as it runs, once a second, to a real
// store: the file store (a bbolt file) and Redis. It reports the
// process's CPU per request (the flushes included), the requests a
// second, and the store's writes a second: the recorder's writes
// (writes/s), and as the store saw them, the file's commits (bbolt's
// transaction id) or the Redis server's script calls (EVALSHA and EVAL,
// INFO commandstats). At most one a second, whatever the rate of requests.
// Run it for several seconds, so that the flushes are counted over more
// than one:
//
//	go test -run '^$' -bench 'RecordWrites' -benchtime 5s -count 3 ./internal/series
func BenchmarkRecordWrites(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	var run atomic.Int64
	for _, st := range []struct {
		name string
		open func(b *testing.B, source string) (backend, func() int64)
	}{
		{name: "file", open: func(b *testing.B, source string) (backend, func() int64) {
			s := openFile(b, filepath.Join(b.TempDir(), "store.db"))
			be, err := newFileBackend(s.File(), source)
			if err != nil {
				b.Fatal(err)
			}
			return be, func() int64 {
				var id int
				if err := s.File().View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
					b.Fatal(err)
				}
				return int64(id)
			}
		}},
		{name: "redis", open: func(b *testing.B, source string) (backend, func() int64) {
			be, err := newRedisBackend(openRedis(b, srv.Addr()).Streams(), source)
			if err != nil {
				b.Fatal(err)
			}
			return be, func() int64 {
				c := testkit.RedisCommands(b, rc)
				return c["evalsha"] + c["eval"]
			}
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			source := "bench_" + strconv.FormatInt(run.Add(1), 10) // a run's own counts
			be, storeWrites := st.open(b, source)
			cb := &countingBackend{backend: be}
			r := newRecorder(source, cb, zap.NewNop())
			stored0 := storeWrites()
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu := time.Now(), testkit.CPUTime()
			b.RunParallel(func(pb *testing.PB) { recordRequests(r, pb) })
			elapsed := time.Since(start).Seconds()
			b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
			b.StopTimer()
			writes, stored := cb.adds.Load(), storeWrites()-stored0
			b.ReportMetric(float64(b.N)/elapsed, "requests/s")
			b.ReportMetric(float64(writes)/elapsed, "writes/s")
			b.ReportMetric(float64(stored)/elapsed, "store-writes/s")
			r.close() // the last write, of what is left: not in the run
			if tot, err := r.Totals(context.Background()); err != nil || tot.Results["new"] != int64(b.N) {
				b.Fatalf("totals %v, %v: want %d new", tot.Results, err, b.N)
			}
		})
	}
}
