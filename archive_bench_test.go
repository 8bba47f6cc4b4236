//go:build porting

package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkRedisArchive is the load of new deliveries on the redis store,
// many at once (GOMAXPROCS × 16 goroutines, as wrk's connections would
// be), with the archive off and on: the archive's cost is the ratio of
// the two. "new" is a new key per delivery (claim, then completion with
// the append in its pipeline); "replay" a completed key (the append goes
// through the background queue).
func BenchmarkRedisArchive(b *testing.B) {
	srv := startRedis(b)
	for _, mode := range []string{"new", "replay"} {
		for _, archive := range []string{"off", "on"} {
			b.Run(mode+"/archive="+archive, func(b *testing.B) {
				cfg := fmt.Sprintf(`{"store":{"module":"redis","addresses":[%q],"timeout":2000000000}`, srv.addr())
				if archive == "on" {
					cfg += `,"archive":{}`
				}
				h := &Handler{}
				if err := json.Unmarshal([]byte(cfg+"}"), h); err != nil {
					b.Fatal(err)
				}
				h = newBenchHandler(b, h)
				if h.archive != nil {
					h.archive.logger = h.logger
				}
				prefix := "evt_" + strconv.FormatInt(benchRun.Add(1), 10) + "_"
				if mode == "replay" {
					br := newBenchRequest(1<<10, false)
					w := &benchResponseWriter{h: make(http.Header)}
					if err := h.ServeHTTP(w, br.reset(prefix), benchNext); err != nil || w.status != 200 {
						b.Fatalf("first delivery: %d %v", w.status, err)
					}
				}
				var n atomic.Int64
				b.SetBytes(1 << 10)
				b.ReportAllocs()
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					br := newBenchRequest(1<<10, false)
					w := &benchResponseWriter{h: make(http.Header)}
					for pb.Next() {
						key := prefix
						if mode == "new" {
							key += strconv.FormatInt(n.Add(1), 10)
						}
						w.reset()
						if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.status != 200 {
							b.Errorf("status %d, err %v", w.status, err)
							return
						}
					}
				})
				b.StopTimer()
				if h.archive != nil {
					h.archive.queue.stop()
				}
			})
		}
	}
}
