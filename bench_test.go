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

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// Handler benchmarks: one reused request per benchmark so that only the
// handler's own work is measured; the next handler writes a small JSON answer.

// benchResponseWriter is a ResponseWriter that discards and reuses its header.
type benchResponseWriter struct {
	h      http.Header
	status int
}

func (w *benchResponseWriter) Header() http.Header         { return w.h }
func (w *benchResponseWriter) WriteHeader(status int)      { w.status = status }
func (w *benchResponseWriter) Write(p []byte) (int, error) { return len(p), nil }

func (w *benchResponseWriter) reset() {
	clear(w.h)
	w.status = 0
}

var benchAnswer = []byte(`{"received":true}`)

var benchNext = caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
	// read and close the body, as reverse_proxy's transport does
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(benchAnswer)
	return err
})

// newBenchHandler provisions h; without a store configured, it uses a
// memory store of its own.
func newBenchHandler(b *testing.B, h *Handler) *Handler {
	b.Helper()
	ctx, cancel := newTestContext(b)
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
	h.logger = zap.NewNop() // the bare context logs at DEBUG
	if h.ownedStore != nil {
		// room for every key a benchmark run creates: no eviction
		h.ownedStore.table.setMaxEntries(50_000_000)
		b.Cleanup(func() { h.ownedStore.table.setMaxEntries(defaultMaxEntries) })
	}
	return h
}

// benchRequest builds a reusable request whose body is reset per iteration.
type benchRequest struct {
	r    *http.Request
	body *bytes.Reader
	data []byte
}

func newBenchRequest(size int, signed bool) *benchRequest {
	data := bytes.Repeat([]byte("x"), size)
	br := &benchRequest{data: data, body: bytes.NewReader(data)}
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, nil)
	if signed {
		r.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(benchSecret, string(data)))
	}
	br.r = r
	return br
}

func (br *benchRequest) reset(key string) *http.Request {
	br.body.Reset(br.data)
	br.r.Body = io.NopCloser(br.body)
	br.r.ContentLength = int64(len(br.data))
	br.r.Header.Set("Idempotency-Key", key)
	return br.r
}

// benchSizes are the request bodies every handler benchmark runs with.
var benchSizes = []int{1 << 10, 64 << 10, 1 << 20}

// benchSecret is the github secret of the signed variants.
const benchSecret = "bench-secret"

// benchRun numbers the runs of a benchmark function, so that a store shared
// by several runs (Redis) never sees a key of an earlier run.
var benchRun atomic.Int64

// benchServeHTTP runs "new/<size>" and "replay/<size>" for each size on a
// handler made by newHandler (once per run of each sub-benchmark). With
// signed, the request carries a valid `github` signature of its body,
// computed once.
func benchServeHTTP(b *testing.B, sizes []int, signed bool, newHandler func(b *testing.B) *Handler) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("new/%s", sizeName(size)), func(b *testing.B) {
			h := newHandler(b)
			prefix := "evt_" + strconv.FormatInt(benchRun.Add(1), 10) + "_"
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = prefix + strconv.Itoa(i)
			}
			br := newBenchRequest(size, signed)
			w := &benchResponseWriter{h: make(http.Header)}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w.reset()
				if err := h.ServeHTTP(w, br.reset(keys[i]), benchNext); err != nil || w.status != 200 || w.h.Get(replayedHeader) != "" {
					b.Fatalf("not a new delivery: status %d, header %v, err %v", w.status, w.h, err)
				}
			}
		})
		b.Run(fmt.Sprintf("replay/%s", sizeName(size)), func(b *testing.B) {
			h := newHandler(b)
			key := "evt_replayed_" + strconv.FormatInt(benchRun.Add(1), 10)
			br := newBenchRequest(size, signed)
			w := &benchResponseWriter{h: make(http.Header)}
			if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.status != 200 {
				b.Fatalf("first delivery: status %d, err %v", w.status, err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w.reset()
				if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.h.Get(replayedHeader) != "true" {
					b.Fatalf("not a replay: %v %v", w.h, err)
				}
			}
		})
	}
}

// memoryBenchHandler makes the handlers of the memory store benchmarks;
// with signed, they verify `github` signatures.
func memoryBenchHandler(signed bool) func(b *testing.B) *Handler {
	return func(b *testing.B) *Handler {
		h := &Handler{}
		if signed {
			h.Verify = &VerifyConfig{Scheme: "github", Secrets: []string{benchSecret}}
		}
		return newBenchHandler(b, h)
	}
}

func BenchmarkServeHTTPMemory(b *testing.B) {
	benchServeHTTP(b, benchSizes, false, memoryBenchHandler(false))
}

// BenchmarkServeHTTPMemorySigned is BenchmarkServeHTTPMemory with `github`
// verification (HMAC-SHA256 of the body in X-Hub-Signature-256).
func BenchmarkServeHTTPMemorySigned(b *testing.B) {
	benchServeHTTP(b, benchSizes[:2], true, memoryBenchHandler(true))
}

// BenchmarkServeHTTPRedis is BenchmarkServeHTTPMemory on the redis store,
// against one redis-server started for the whole benchmark. Each call goes
// out alone (one request at a time): a new delivery is two round trips
// (claim, complete), a replay one.
func BenchmarkServeHTTPRedis(b *testing.B) {
	srv := startRedis(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.addr())
	benchServeHTTP(b, benchSizes, false, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(store)})
	})
}

// BenchmarkServeHTTPBaseline is the next handler alone on the same request:
// what the handler's cost is measured against.
func BenchmarkServeHTTPBaseline(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			br := newBenchRequest(size, false)
			w := &benchResponseWriter{h: make(http.Header)}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w.reset()
				if err := benchNext.ServeHTTP(w, br.reset("evt")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// BenchmarkServeHTTPRedisParallel is BenchmarkServeHTTPRedis at 1 KiB with
// 16 requests per CPU at once, as under load: concurrent store calls share
// pipelines, so this is the cost per request that a loaded Caddy pays.
func BenchmarkServeHTTPRedisParallel(b *testing.B) {
	srv := startRedis(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.addr())
	for _, replay := range []bool{false, true} {
		name := "new"
		if replay {
			name = "replay"
		}
		b.Run(name, func(b *testing.B) {
			h := newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(store)})
			prefix := "evt_" + strconv.FormatInt(benchRun.Add(1), 10) + "_"
			if replay {
				br := newBenchRequest(1<<10, false)
				w := &benchResponseWriter{h: make(http.Header)}
				if err := h.ServeHTTP(w, br.reset(prefix+"replayed"), benchNext); err != nil || w.status != 200 {
					b.Fatalf("first delivery: status %d, err %v", w.status, err)
				}
			}
			var n atomic.Int64
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				br := newBenchRequest(1<<10, false)
				w := &benchResponseWriter{h: make(http.Header)}
				for pb.Next() {
					key := prefix + "replayed"
					if !replay {
						key = prefix + strconv.FormatInt(n.Add(1), 10)
					}
					w.reset()
					if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.status != 200 || (w.h.Get(replayedHeader) == "true") != replay {
						b.Errorf("status %d, header %v, err %v", w.status, w.h, err)
						return
					}
				}
			})
		})
	}
}
