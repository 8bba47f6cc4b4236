package webhookidempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// BenchmarkRedisArchive is the load of new deliveries on the redis store,
// many at once (GOMAXPROCS × 16 goroutines, as wrk's connections would
// be), with the archive off and on: the archive's cost is the ratio of
// the two. "new" is a new key per delivery (claim, then completion with
// the append in its pipeline); "replay" a completed key (the append goes
// through the background queue).
func BenchmarkRedisArchive(b *testing.B) {
	srv := testkit.StartRedis(b)
	for _, mode := range []string{"new", "replay"} {
		for _, archive := range []string{"off", "on"} {
			b.Run(mode+"/archive="+archive, func(b *testing.B) {
				cfg := fmt.Sprintf(`{"store":{"module":"redis","addresses":[%q],"timeout":2000000000}`, srv.Addr())
				if archive == "on" {
					cfg += `,"archive":{}`
				}
				h := &Handler{}
				if err := json.Unmarshal([]byte(cfg+"}"), h); err != nil {
					b.Fatal(err)
				}
				h = newArchiveBenchHandler(b, h)
				prefix := "evt_" + strconv.FormatInt(archiveBenchRun.Add(1), 10) + "_"
				if mode == "replay" {
					br := newArchiveBenchRequest(1 << 10)
					w := &archiveBenchWriter{h: make(http.Header)}
					if err := h.ServeHTTP(w, br.reset(prefix), archiveBenchNext); err != nil || w.status != 200 {
						b.Fatalf("first delivery: %d %v", w.status, err)
					}
				}
				var n atomic.Int64
				b.SetBytes(1 << 10)
				b.ReportAllocs()
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					br := newArchiveBenchRequest(1 << 10)
					w := &archiveBenchWriter{h: make(http.Header)}
					for pb.Next() {
						key := prefix
						if mode == "new" {
							key += strconv.FormatInt(n.Add(1), 10)
						}
						w.reset()
						if err := h.ServeHTTP(w, br.reset(key), archiveBenchNext); err != nil || w.status != 200 {
							b.Errorf("status %d, err %v", w.status, err)
							return
						}
					}
				})
				b.StopTimer()
				if h.archive != nil {
					// what the queue holds is appended before the next run
					h.archive.Stop()
				}
			})
		}
	}
}

// archiveBenchRun numbers the runs of BenchmarkRedisArchive's
// sub-benchmarks, so that a run never sees a key of an earlier one.
var archiveBenchRun atomic.Int64

// newArchiveBenchHandler provisions h in a configuration context of its
// own (which logs errors only), cleaned up when the benchmark ends.
func newArchiveBenchHandler(b *testing.B, h *Handler) *Handler {
	b.Helper()
	ctx, cancel := testkit.NewContext(b)
	b.Cleanup(cancel)
	if h.Source == "" {
		h.Source = "bench"
	}
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	if err := h.Validate(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Cleanup() })
	return h
}

// archiveBenchWriter is a ResponseWriter that discards the body and reuses
// its header.
type archiveBenchWriter struct {
	h      http.Header
	status int
}

func (w *archiveBenchWriter) Header() http.Header         { return w.h }
func (w *archiveBenchWriter) WriteHeader(status int)      { w.status = status }
func (w *archiveBenchWriter) Write(p []byte) (int, error) { return len(p), nil }

// SetReadDeadline lets the handler bound the body's arrival, as a server's
// ResponseWriter does (http.ResponseController).
func (w *archiveBenchWriter) SetReadDeadline(time.Time) error { return nil }

func (w *archiveBenchWriter) reset() {
	clear(w.h)
	w.status = 0
}

// archiveBenchNext reads and closes the body, as reverse_proxy's transport
// does, and writes a small JSON answer.
var archiveBenchNext = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte(`{"received":true}`))
	return err
})

// archiveBenchRequest is one request reused for every delivery of a
// goroutine, its body reset each time.
type archiveBenchRequest struct {
	r    *http.Request
	body *bytes.Reader
	data []byte
}

func newArchiveBenchRequest(size int) *archiveBenchRequest {
	data := bytes.Repeat([]byte("x"), size)
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, nil)
	return &archiveBenchRequest{r: r, body: bytes.NewReader(data), data: data}
}

func (br *archiveBenchRequest) reset(key string) *http.Request {
	br.body.Reset(br.data)
	br.r.Body = io.NopCloser(br.body)
	br.r.ContentLength = int64(len(br.data))
	br.r.Header.Set("Idempotency-Key", key)
	return br.r
}
