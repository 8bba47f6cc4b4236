package webhookidempotency

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
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

// SetReadDeadline lets the handler bound the body's arrival, as a server's
// ResponseWriter does (http.ResponseController).
func (w *benchResponseWriter) SetReadDeadline(time.Time) error { return nil }

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

// newBenchHandler provisions h; without a store configured, it uses the
// default store, the file store in the test process's data directory.
func newBenchHandler(b *testing.B, h *Handler) *Handler {
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
	h.logger = zap.NewNop() // the bare context logs at DEBUG
	return h
}

// benchRequest builds a reusable request whose body is reset per iteration.
// A signed request is a JSON body `{"id":"<key>","pad":"xx…"}` of the given
// size with a `github` signature: each new key gets a body of its own,
// signed again (an identical signed body under a new key is a replay, see
// guard.go). The signing reuses its buffers, so it allocates nothing.
type benchRequest struct {
	r      *http.Request
	header http.Header // r's, set again on every reset: a route that forwards hands the next handler a copy
	body   *bytes.Reader
	data   []byte

	signed  bool
	mac     hash.Hash
	sig     []byte // "sha256=" and the hex HMAC
	lastKey string
}

func newBenchRequest(size int, signed bool) *benchRequest {
	data := bytes.Repeat([]byte("x"), size)
	br := &benchRequest{data: data, body: bytes.NewReader(data), signed: signed}
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, nil)
	if signed {
		br.mac = hmac.New(sha256.New, []byte(benchSecret))
		br.sig = make([]byte, len("sha256=")+64)
		copy(br.sig, "sha256=")
		r.Header["X-Hub-Signature-256"] = []string{""}
	}
	br.r, br.header = r, r.Header
	return br
}

func (br *benchRequest) reset(key string) *http.Request {
	br.r.Header = br.header
	if br.signed && key != br.lastKey {
		br.lastKey = key
		// {"id":"<key>","pad":"xxx…"}, the key's bytes padded with x
		n := copy(br.data, `{"id":"`)
		n += copy(br.data[n:], key)
		n += copy(br.data[n:], `","pad":"`)
		for ; n < len(br.data)-2; n++ {
			br.data[n] = 'x'
		}
		copy(br.data[len(br.data)-2:], `"}`)
		br.mac.Reset()
		br.mac.Write(br.data)
		var sum [sha256.Size]byte
		hex.Encode(br.sig[len("sha256="):], br.mac.Sum(sum[:0]))
		br.r.Header["X-Hub-Signature-256"][0] = unsafe.String(&br.sig[0], len(br.sig))
	}
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
			cpu := testkit.CPUTime()
			for i := 0; i < b.N; i++ {
				w.reset()
				if err := h.ServeHTTP(w, br.reset(keys[i]), benchNext); err != nil || w.status != 200 || w.h.Get(record.ReplayedHeader) != "" {
					b.Fatalf("not a new delivery: status %d, header %v, err %v", w.status, w.h, err)
				}
			}
			reportCPU(b, cpu)
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
			cpu := testkit.CPUTime()
			for i := 0; i < b.N; i++ {
				w.reset()
				if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.h.Get(record.ReplayedHeader) != "true" {
					b.Fatalf("not a replay: %v %v", w.h, err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// benchMemoryStore is the memory store of the benchmarks, with room for
// every key a benchmark run creates: no eviction.
const benchMemoryStore = `{"module":"memory","max_entries":50000000}`

// memoryBenchHandler makes the handlers of the memory store benchmarks;
// with signed, they verify `github` signatures, keyed as key says (nil:
// the default, `header:Idempotency-Key body`).
func memoryBenchHandler(signed bool, key ...string) func(b *testing.B) *Handler {
	return func(b *testing.B) *Handler {
		h := &Handler{Key: key, StoreRaw: json.RawMessage(benchMemoryStore)}
		if signed {
			h.Verify = &providers.VerifyConfig{Scheme: "github", Secrets: []string{benchSecret}}
		}
		return newBenchHandler(b, h)
	}
}

func BenchmarkServeHTTPMemory(b *testing.B) {
	benchServeHTTP(b, benchSizes, false, memoryBenchHandler(false))
}

// BenchmarkServeHTTPSeries is BenchmarkServeHTTPMemory at 1 KiB with the
// source's counts and series (internal/series: the result, the handling
// time and the application's, added to counters in memory; written to the
// store once a second, off the request path) and without them: the
// handler with no recorder, as none was configured. Both read the clock
// as the handler does.
//
//	go test -run '^$' -bench 'ServeHTTPSeries' -benchmem -count 3 .
func BenchmarkServeHTTPSeries(b *testing.B) {
	for _, recorded := range []bool{false, true} {
		b.Run(map[bool]string{false: "unrecorded", true: "recorded"}[recorded], func(b *testing.B) {
			benchServeHTTP(b, benchSizes[:1], false, func(b *testing.B) *Handler {
				h := memoryBenchHandler(false)(b)
				if !recorded {
					h.series, h.metrics.series = nil, nil
				}
				return h
			})
		})
	}
}

// BenchmarkServeHTTPMemoryArchive is BenchmarkServeHTTPMemory at 1 KiB with
// an archive: a new delivery's event, with the application's answer as
// its attempt, goes out with its key's completion; a replay's through the
// background queue.
func BenchmarkServeHTTPMemoryArchive(b *testing.B) {
	benchServeHTTP(b, benchSizes[:1], false, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(benchMemoryStore), Archive: &ArchiveConfig{}})
	})
}

// BenchmarkServeHTTPMemorySigned is BenchmarkServeHTTPMemory with `github`
// verification (HMAC-SHA256 of the body in X-Hub-Signature-256). The
// Idempotency-Key header is not signed, so each new key is claimed with its
// guard (guard.go); a new delivery's time includes signing its body.
func BenchmarkServeHTTPMemorySigned(b *testing.B) {
	benchServeHTTP(b, benchSizes[:2], true, memoryBenchHandler(true))
}

// BenchmarkServeHTTPMemorySignedUnguarded is BenchmarkServeHTTPMemorySigned
// keyed on the signed body's `json:id`, which needs no guard: the
// difference is what the guard costs.
func BenchmarkServeHTTPMemorySignedUnguarded(b *testing.B) {
	benchServeHTTP(b, benchSizes[:2], true, memoryBenchHandler(true, "json:id", "body"))
}

// BenchmarkServeHTTPFile is BenchmarkServeHTTPMemory on the default store,
// the file store (`sync always`): a new delivery's completion is on disk
// before the answer, one fsync per completion when requests come one at
// a time (BenchmarkServeHTTPFileParallel shows group commit).
func BenchmarkServeHTTPFile(b *testing.B) {
	benchServeHTTP(b, benchSizes, false, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{})
	})
}

// BenchmarkServeHTTPFileParallel is BenchmarkServeHTTPFile at 1 KiB with 16
// requests per CPU at once, as under load: concurrent completions share
// one commit and one fsync.
func BenchmarkServeHTTPFileParallel(b *testing.B) {
	for _, replay := range []bool{false, true} {
		b.Run(map[bool]string{false: "new", true: "replay"}[replay], func(b *testing.B) {
			benchParallel(b, newBenchHandler(b, &Handler{}), replay)
		})
	}
}

// BenchmarkServeHTTPRedis is BenchmarkServeHTTPMemory on the redis store,
// against one redis-server started for the whole benchmark. Each call goes
// out alone (one request at a time): a new delivery is two round trips
// (claim, complete), a replay one.
// BenchmarkServeHTTPRedisArchive is BenchmarkServeHTTPRedis at 1 KiB with
// an archive: a new delivery's event goes out in its completion's pipeline.
func BenchmarkServeHTTPRedisArchive(b *testing.B) {
	srv := testkit.StartRedis(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.Addr())
	benchServeHTTP(b, benchSizes[:1], false, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(store), Archive: &ArchiveConfig{}})
	})
}

func BenchmarkServeHTTPRedis(b *testing.B) {
	srv := testkit.StartRedis(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.Addr())
	benchServeHTTP(b, benchSizes, false, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(store)})
	})
}

// BenchmarkServeHTTPRedisSigned is BenchmarkServeHTTPRedis with `github`
// verification: the key (the unsigned Idempotency-Key) and its guard are
// claimed, completed and replayed in one round trip each, as a key alone
// is; BenchmarkServeHTTPRedisSignedUnguarded keys on the signed `json:id`.
func BenchmarkServeHTTPRedisSigned(b *testing.B) {
	benchRedisSigned(b)
}

func BenchmarkServeHTTPRedisSignedUnguarded(b *testing.B) {
	benchRedisSigned(b, "json:id", "body")
}

func benchRedisSigned(b *testing.B, key ...string) {
	srv := testkit.StartRedis(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.Addr())
	benchServeHTTP(b, benchSizes[:2], true, func(b *testing.B) *Handler {
		return newBenchHandler(b, &Handler{
			StoreRaw: json.RawMessage(store),
			Key:      key,
			Verify:   &providers.VerifyConfig{Scheme: "github", Secrets: []string{benchSecret}},
		})
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

// reportCPU reports the process's CPU time (user and system, every
// goroutine's) per op since cpu, as cpu-ns/op: on a shared machine the
// cost of the work, where the wall time also counts the waits for a core.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
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
// pipelines, so this is the cost per request that a loaded Caddy pays. It
// reports Redis's own CPU per request (used_cpu_user + used_cpu_sys of INFO
// cpu) as redis-us/op. The batcher's own benchmarks (store/redisstore)
// compare its settings.
func BenchmarkServeHTTPRedisParallel(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	store := fmt.Sprintf(`{"module":"redis","addresses":[%q]}`, srv.Addr())
	for _, replay := range []bool{false, true} {
		b.Run(map[bool]string{false: "new", true: "replay"}[replay], func(b *testing.B) {
			h := newBenchHandler(b, &Handler{StoreRaw: json.RawMessage(store)})
			cpu0 := testkit.RedisCPU(b, rc)
			benchParallel(b, h, replay)
			b.ReportMetric((testkit.RedisCPU(b, rc)-cpu0)*1e6/float64(b.N), "redis-us/op")
		})
	}
}

// benchParallel runs new deliveries (or replays of one) of 1 KiB through
// h, 16 requests per CPU at once.
func benchParallel(b *testing.B, h *Handler, replay bool) {
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
			if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.status != 200 || (w.h.Get(record.ReplayedHeader) == "true") != replay {
				b.Errorf("status %d, header %v, err %v", w.status, w.h, err)
				return
			}
		}
	})
	b.StopTimer()
}

// BenchmarkBodyDeadline is the body's deadline, bounded by the server's
// read timeout, on a request whose context is built as net/http and Caddy
// build it (the server at the root, under the connection's and the
// request's contexts and Caddy's seven values): "lookup" finds the server
// in the context on every request, "kept" uses the bound the handler kept
// from its first request.
func BenchmarkBodyDeadline(b *testing.B) {
	ctx := context.WithValue(context.Background(), http.ServerContextKey, &http.Server{ReadTimeout: time.Minute})
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, &net.TCPAddr{})
	ctx = context.WithValue(ctx, caddyhttp.ConnCtxKey, nil)
	ctx, cancelConn := context.WithCancel(ctx)
	defer cancelConn()
	ctx, cancelRequest := context.WithCancel(ctx)
	defer cancelRequest()
	for _, key := range []caddy.CtxKey{caddy.ReplacerCtxKey, caddyhttp.ServerCtxKey, caddyhttp.VarsCtxKey,
		"route_group", caddyhttp.OriginalRequestCtxKey, caddyhttp.ExtraLogFieldsCtxKey, caddyhttp.ErrorCtxKey} {
		ctx = context.WithValue(ctx, key, nil)
	}
	h := &Handler{BodyTimeout: caddy.Duration(10 * time.Second), bodyWait: new(atomic.Int64)}
	rs := &requestState{h: h, r: httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx)}
	for _, kept := range []bool{false, true} {
		b.Run(map[bool]string{false: "lookup", true: "kept"}[kept], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !kept {
					h.bodyWait.Store(0)
				}
				_ = rs.bodyDeadline()
			}
		})
	}
}

// The handler's own allocations per delivery on the memory store, the
// request and the next handler's counted apart (BenchmarkServeHTTPBaseline):
// a new delivery makes 7 (the request's state, what serve needs, the key's
// placeholder value, the store key, the owner, the recorded answer and the
// store's copy of it), a replay 6 (the state, the key's value, the store
// key, the owner, the replayed headers' names and values). BENCHMARKS.md
// ("Allocations and clock reads per request") gives the count before.
func TestServeHTTPAllocations(t *testing.T) {
	if testkit.RaceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: allocations are counted without it (make test's second pass)")
	}
	h := allocHandler(t)
	br := newBenchRequest(1<<10, false)
	w := &benchResponseWriter{h: make(http.Header)}
	harness := testing.AllocsPerRun(500, func() {
		w.reset()
		_ = benchNext.ServeHTTP(w, br.reset("evt_harness"))
	})
	if err := h.ServeHTTP(w, br.reset("evt_allocs_replayed"), benchNext); err != nil || w.status != 200 {
		t.Fatalf("first delivery: %d %v", w.status, err)
	}
	replay := testing.AllocsPerRun(500, func() {
		w.reset()
		if err := h.ServeHTTP(w, br.reset("evt_allocs_replayed"), benchNext); err != nil || w.h.Get(record.ReplayedHeader) != "true" {
			t.Fatalf("not a replay: %v %v", w.h, err)
		}
	})
	keys := make([]string, 501) // AllocsPerRun runs once more than asked
	for i := range keys {
		keys[i] = "evt_allocs_" + strconv.Itoa(i)
	}
	n := 0
	fresh := testing.AllocsPerRun(500, func() {
		w.reset()
		if err := h.ServeHTTP(w, br.reset(keys[n]), benchNext); err != nil || w.status != 200 || w.h.Get(record.ReplayedHeader) != "" {
			t.Fatalf("not a new delivery: %d %v %v", w.status, w.h, err)
		}
		n++
	})
	if got := fresh - harness; got > 7 {
		t.Errorf("a new delivery allocates %.1f times in the handler, want at most 7", got)
	}
	// a replay does not call the next handler: its header is not made
	if got := replay - (harness - 1); got > 6 {
		t.Errorf("a replay allocates %.1f times in the handler, want at most 6", got)
	}
}
