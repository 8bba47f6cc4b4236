package webhookidempotency

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Without a recording span in the request's context (no `tracing` on the
// route, or a request its sampler left out), the request pays nothing for
// traces: the steps' calls allocate nothing, and a whole request
// allocates as one with no span at all. Docs/operating.md: Traces.

// allocHandler is the handler of the allocation tests and the traced
// benchmarks: the memory store, keyed by Idempotency-Key, then the body.
func allocHandler(t testing.TB) *Handler {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	t.Cleanup(cancel)
	h := &Handler{Source: "bench", StoreRaw: json.RawMessage(benchMemoryStore)}
	if err := h.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Cleanup() })
	return h
}

func TestUntracedStepsAllocateNothing(t *testing.T) {
	h := allocHandler(t)
	br := newBenchRequest(1<<10, false)
	w := &benchResponseWriter{h: make(http.Header)}
	r := br.reset("evt_untraced")
	for name, ctx := range map[string]context.Context{
		"no span":     r.Context(),
		"not sampled": trace.ContextWithRemoteSpanContext(r.Context(), unsampled()),
	} {
		rs := h.newRequest(w, r.WithContext(ctx), benchNext)
		if rs.trace != nil {
			t.Fatalf("%s: the request has a trace", name)
		}
		n := testing.AllocsPerRun(200, func() {
			rs.startTrace()
			rs.traceStep(spanVerify)
			rs.traceResult("new")
			rs.traceStep(spanApp)
			_ = rs.traceContext()
			rs.traceEnd()
		})
		if n != 0 {
			t.Errorf("%s: the steps' trace calls allocate %.1f times, want 0", name, n)
		}
	}
}

func TestUnsampledRequestAllocatesAsAnUntracedOne(t *testing.T) {
	h := allocHandler(t)
	br := newBenchRequest(1<<10, false)
	w := &benchResponseWriter{h: make(http.Header)}
	// a replay: the path that must stay cheapest
	if err := h.ServeHTTP(w, br.reset("evt_replayed"), benchNext); err != nil || w.status != 200 {
		t.Fatalf("first delivery: %d %v", w.status, err)
	}
	plain := br.r.Context()
	sampledOut := trace.ContextWithRemoteSpanContext(plain, unsampled())
	allocs := func(ctx context.Context) float64 {
		return testing.AllocsPerRun(200, func() {
			w.reset()
			r := br.reset("evt_replayed")
			br.r = r.WithContext(ctx)
			if err := h.ServeHTTP(w, br.r, benchNext); err != nil || w.h.Get(record.ReplayedHeader) != "true" {
				t.Fatalf("not a replay: %v %v", w.h, err)
			}
		})
	}
	untraced, notSampled := allocs(plain), allocs(sampledOut)
	if notSampled != untraced {
		t.Errorf("a replay allocates %.1f times with a span not sampled, %.1f with none: want the same", notSampled, untraced)
	}
}

// unsampled is the span context of a request the sampler left out.
func unsampled() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
}

// BenchmarkServeHTTPTraced is BenchmarkServeHTTPMemory at 1 KiB with
// tracing off (no span in the request's context) and on: a real SDK
// TracerProvider (batching to an exporter that drops the spans), a span
// per request started as Caddy's tracing handler starts it, and the
// handler's own spans under it. "caddy-span" is that request span alone
// around the next handler, without this handler: what Caddy's tracing
// costs by itself, to subtract from "on".
func BenchmarkServeHTTPTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("caddy")
	for _, kind := range []string{"new", "replay"} {
		for _, mode := range []string{"off", "on", "caddy-span"} {
			b.Run(kind+"/"+mode, func(b *testing.B) {
				h := allocHandler(b)
				prefix := "evt_" + strconv.FormatInt(benchRun.Add(1), 10) + "_"
				br := newBenchRequest(1<<10, false)
				w := &benchResponseWriter{h: make(http.Header)}
				if kind == "replay" {
					if err := h.ServeHTTP(w, br.reset(prefix+"r"), benchNext); err != nil || w.status != 200 {
						b.Fatalf("first delivery: %d %v", w.status, err)
					}
				}
				base := br.r.Context()
				b.SetBytes(1 << 10)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					key := prefix + "r"
					if kind == "new" {
						key = prefix + strconv.Itoa(i)
					}
					w.reset()
					r := br.reset(key)
					var err error
					switch mode {
					case "off":
						err = h.ServeHTTP(w, r, benchNext)
					case "on":
						ctx, span := tracer.Start(base, "handler", trace.WithSpanKind(trace.SpanKindServer))
						err = h.ServeHTTP(w, r.WithContext(ctx), benchNext)
						span.End()
					case "caddy-span":
						ctx, span := tracer.Start(base, "handler", trace.WithSpanKind(trace.SpanKindServer))
						err = benchNext.ServeHTTP(w, r.WithContext(ctx))
						span.End()
					}
					if err != nil || w.status != 200 {
						b.Fatalf("status %d, err %v", w.status, err)
					}
				}
			})
		}
	}
}
