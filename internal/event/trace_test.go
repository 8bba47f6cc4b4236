package event

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A delivery's trace with a real OpenTelemetry SDK: the accepting
// request's span context kept as W3C Trace Context, and each delivery a
// span that is its child, linked to it, whose context the application
// gets.

// acceptingSpan starts a recording span as Caddy's tracing handler would
// for a request whose caller sent a tracestate.
func acceptingSpan(t *testing.T, tp trace.TracerProvider) (context.Context, trace.Span) {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=opaque")
	if err != nil {
		t.Fatal(err)
	}
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	return tp.Tracer("caddy").Start(trace.ContextWithRemoteSpanContext(context.Background(), caller), "handler")
}

func TestTraceKeepsTheAcceptingSpanContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := acceptingSpan(t, tp)
	defer span.End()

	tr := TraceOf(ctx)
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if tr.Parent != want || tr.State != "vendor=opaque" {
		t.Fatalf("TraceOf = %+v, want traceparent %s and tracestate vendor=opaque", tr, want)
	}
	got := tr.SpanContext()
	if !got.Equal(sc.WithRemote(true)) {
		t.Fatalf("SpanContext() = %+v, want %+v", got, sc.WithRemote(true))
	}
	if tr.TraceID() != sc.TraceID().String() {
		t.Fatalf("TraceID() = %q, want %s", tr.TraceID(), sc.TraceID())
	}

	// no span, or one that does not record: no trace
	if z := TraceOf(context.Background()); z != (Trace{}) || z.TraceID() != "" || z.SpanContext().IsValid() {
		t.Fatalf("TraceOf(no span) = %+v", z)
	}
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), sc.WithTraceFlags(0))
	if z := TraceOf(unsampled); z != (Trace{}) {
		t.Fatalf("TraceOf(a span that does not record) = %+v, want none", z)
	}
}

func TestStartDeliveryIsAChildLinkedToTheAcceptingSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	actx, accepting := acceptingSpan(t, tp)
	tr := TraceOf(actx)
	accepting.End()
	Tracer(tp)

	ctx, span := tr.StartDelivery(context.Background(), "webhook_idempotency.attempt", attribute.Int("webhook.attempt", 1))
	// the stored headers hold the accepting request's trace context, as
	// Caddy's tracing handler injected it: the delivery's replace them
	h := http.Header{"Traceparent": {tr.Parent}, "Tracestate": {"stale=1"}}
	InjectTrace(ctx, h)
	span.End()

	ended := rec.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want the accepting one and the delivery", len(ended))
	}
	d := ended[1]
	asc := accepting.SpanContext()
	if d.Name() != "webhook_idempotency.attempt" || d.SpanKind() != trace.SpanKindClient {
		t.Errorf("delivery span %q of kind %v", d.Name(), d.SpanKind())
	}
	if d.Parent().SpanID() != asc.SpanID() || d.SpanContext().TraceID() != asc.TraceID() {
		t.Errorf("delivery's parent %v, trace %v; want the accepting span %v", d.Parent().SpanID(), d.SpanContext().TraceID(), asc.SpanID())
	}
	if links := d.Links(); len(links) != 1 || !links[0].SpanContext.Equal(asc.WithRemote(true)) {
		t.Errorf("delivery's links %+v, want one to the accepting span %v", links, asc)
	}
	want := "00-" + asc.TraceID().String() + "-" + d.SpanContext().SpanID().String() + "-01"
	if got := h.Values("Traceparent"); len(got) != 1 || got[0] != want {
		t.Errorf("traceparent %q, want the delivery's %s", got, want)
	}
	if got := h.Values("Tracestate"); len(got) != 1 || got[0] != "vendor=opaque" {
		t.Errorf("tracestate %q, want the accepting request's vendor=opaque", got)
	}
}

func TestStartDeliveryWithoutATraceOrATracer(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	actx, accepting := acceptingSpan(t, tp)
	tr := TraceOf(actx)
	accepting.End()

	// an event no traced request accepted: nothing recorded, the headers
	// left as they are
	Tracer(tp)
	ctx, span := Trace{}.StartDelivery(context.Background(), "webhook_idempotency.attempt")
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}
	InjectTrace(ctx, h)
	span.End()
	if span.IsRecording() || len(rec.Ended()) != 1 || h.Get("Traceparent") != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00" {
		t.Fatalf("untraced event: recording %v, %d spans ended, traceparent %q", span.IsRecording(), len(rec.Ended()), h.Get("Traceparent"))
	}

	// a process that traced no request yet knows no tracer: the delivery
	// is not recorded, and passes the accepting request's context on
	deliveries.Store(nil)
	t.Cleanup(func() { deliveries.Store(nil) })
	ctx, span = tr.StartDelivery(context.Background(), "webhook_idempotency.attempt")
	h = http.Header{}
	InjectTrace(ctx, h)
	span.End()
	if span.IsRecording() || len(rec.Ended()) != 1 {
		t.Fatalf("no tracer: recording %v, %d spans ended", span.IsRecording(), len(rec.Ended()))
	}
	if h.Get("Traceparent") != tr.Parent || h.Get("Tracestate") != tr.State {
		t.Fatalf("no tracer: traceparent %q tracestate %q, want the accepting request's %q %q", h.Get("Traceparent"), h.Get("Tracestate"), tr.Parent, tr.State)
	}
}
