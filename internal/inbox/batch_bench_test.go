package inbox

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// BenchmarkAcceptBatch (BENCHMARKS.md: Batches in inbox mode): a request
// of 100 new items accepted into a grouped inbox (two order_by groups),
// never started, on the file store (`sync always`) and on a standalone
// Redis: with AcceptBatch, one store call (batch), against the way of
// before, each item accepted alone, 16 at once (each). Reported per
// request: its wall time (ns/op), the process's CPU and, on Redis, the
// script calls and Redis's own CPU (INFO cpu).
//
//	go test -run '^$' -bench AcceptBatch -benchtime 200x ./internal/inbox
func BenchmarkAcceptBatch(b *testing.B) {
	const items = 100
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	stores := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"file", func(b *testing.B) store.Store {
			s, closeStore := openFileStore(b, filepath.Join(b.TempDir(), "store.db"))
			b.Cleanup(closeStore)
			return s
		}},
		{"redis", func(b *testing.B) store.Store { return openRedisStore(b, srv.Addr()) }},
	}
	for _, st := range stores {
		for _, mode := range []string{"batch", "each"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				s := st.open(b)
				ib := newOrderedInbox(b, s, fmt.Sprintf("bench_%s_%s", st.name, mode), "http://127.0.0.1:9", nil)
				run := time.Now().UnixNano() // b.N grows over runs on one Redis
				offer := func(n int) []BatchItem {
					out := make([]BatchItem, items)
					for i := range out {
						out[i] = batchItem(ib, fmt.Sprintf("%d-r%d-i%d", run, n, i), fmt.Sprint("g", i%2))
					}
					return out
				}
				var calls, cpu int64
				var redisCPU float64
				if st.name == "redis" {
					calls, redisCPU = scriptCalls(b, rc), testkit.RedisCPU(b, rc)
				}
				cpu = int64(testkit.CPUTime())
				b.ResetTimer()
				for n := range b.N {
					batch := offer(n)
					if mode == "batch" {
						res, err := ib.AcceptBatch(b.Context(), batch)
						if err != nil || res[items-1].State != store.StateClaimed {
							b.Fatalf("the last item: %s, %v", res[items-1].State, err)
						}
						continue
					}
					var wg sync.WaitGroup
					next := make(chan int)
					for range 16 {
						wg.Go(func() {
							for i := range next {
								it := batch[i]
								if _, err := ib.Accept(b.Context(), it.Claim, it.BodyHash, it.Event); err != nil {
									b.Error(err)
								}
							}
						})
					}
					for i := range batch {
						next <- i
					}
					close(next)
					wg.Wait()
				}
				b.StopTimer()
				b.ReportMetric(float64(int64(testkit.CPUTime())-cpu)/float64(b.N), "cpu-ns/op")
				if st.name == "redis" {
					b.ReportMetric(float64(scriptCalls(b, rc)-calls)/float64(b.N), "scripts/op")
					b.ReportMetric((testkit.RedisCPU(b, rc)-redisCPU)*1e9/float64(b.N), "redis-cpu-ns/op")
				}
			})
		}
	}
}
