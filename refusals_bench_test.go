package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/time/rate"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// BenchmarkRefused is what a forged delivery costs (a `github` route, a
// 1 KiB body whose signature was made with another secret: 401), with the
// route's list of refusals on the file store and on Redis (docs/admin.md,
// "Refusals"):
//
//   - unlisted: the route without its list, the baseline;
//   - listed: the route as it runs, its list written at most 20 times a
//     second (50 at once), the refusals beyond counted, not listed;
//   - every-listed: the list's rate bound lifted, so that every refusal is
//     queued and written (the price of one listed refusal; the queue, 1,024
//     events, drops what comes faster than the store takes it);
//   - flood: listed, from 16 senders per CPU at once, as fast as the
//     handler refuses them.
//
// Besides the process's CPU time per request it reports the refusals
// listed per second of the run and the store's writes per second: the
// file's commits (bbolt's transaction id) or the Redis server's EVAL calls
// (the list's appends; INFO commandstats), with forgeries/s, the rate the
// requests came at. Nothing else writes to the store during a run but the
// source's counts, once a second (internal/series).
//
//	go test -run '^$' -bench 'Refused' -benchmem -benchtime 3s -count 3 .
func BenchmarkRefused(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	stores := []struct {
		name   string
		config func(b *testing.B) string
		writes func(b *testing.B, h *Handler) int64
	}{
		{"file", func(b *testing.B) string {
			return fmt.Sprintf(`{"module":"file","path":%q}`, filepath.Join(b.TempDir(), "store.db"))
		}, func(b *testing.B, h *Handler) int64 {
			var txid int
			if err := h.store.backend.(*filestore.Store).File().View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil }); err != nil {
				b.Fatal(err)
			}
			return int64(txid)
		}},
		{"redis", func(*testing.B) string {
			return fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.Addr())
		}, func(b *testing.B, _ *Handler) int64 {
			return testkit.RedisCommands(b, rc)["eval"]
		}},
	}
	for _, st := range stores {
		for _, variant := range []string{"unlisted", "listed", "every-listed", "flood"} {
			b.Run(st.name+"/"+variant, func(b *testing.B) {
				source := "forged_" + strconv.FormatInt(benchRun.Add(1), 10)
				h := newBenchHandler(b, &Handler{
					Source: source, StoreRaw: json.RawMessage(st.config(b)),
					// the requests are signed with benchSecret
					Verify: &providers.VerifyConfig{Scheme: "github", Secrets: []string{"another-secret"}},
				})
				switch variant {
				case "unlisted":
					h.refusals.stop()
					h.refusals = nil
				case "every-listed":
					h.refusals.limit = rate.NewLimiter(rate.Inf, 0)
				}
				listed := metrics.RefusalsListed.WithLabelValues(source)
				listed0, writes0 := counterValue(b, listed), st.writes(b, h)
				b.ReportAllocs()
				b.ResetTimer()
				start, cpu := time.Now(), testkit.CPUTime()
				if variant == "flood" {
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						br, w := newForgedRequest()
						for pb.Next() {
							refuse(b, h, br, w)
						}
					})
				} else {
					br, w := newForgedRequest()
					for b.Loop() {
						refuse(b, h, br, w)
					}
				}
				elapsed := time.Since(start).Seconds()
				reportCPU(b, cpu)
				b.StopTimer()
				// the list's queue is written in the background: wait until
				// it has written what it took (it drops what it cannot take)
				if h.refusals != nil {
					h.refusals.list.Stop()
				}
				b.ReportMetric(float64(b.N)/elapsed, "forgeries/s")
				b.ReportMetric((counterValue(b, listed)-listed0)/elapsed, "listed/s")
				b.ReportMetric(float64(st.writes(b, h)-writes0)/elapsed, "writes/s")
			})
		}
	}
}

// newForgedRequest is a 1 KiB `github` delivery signed with benchSecret,
// and a writer for its answers.
func newForgedRequest() (*benchRequest, *benchResponseWriter) {
	return newBenchRequest(1<<10, true), &benchResponseWriter{h: make(http.Header)}
}

// refuse sends the forged request to h, which must refuse it with 401.
func refuse(b *testing.B, h *Handler, br *benchRequest, w *benchResponseWriter) {
	w.reset()
	if err := h.ServeHTTP(w, br.reset("evt_forged"), benchNext); err != nil || w.status != http.StatusUnauthorized {
		b.Errorf("a forged delivery: status %d, err %v, want 401", w.status, err)
	}
}
