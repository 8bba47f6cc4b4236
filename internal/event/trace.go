package event

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// A delivery's trace (docs/operating.md: Traces). With Caddy's `tracing`
// handler on the route, the span context of the request that accepted a
// delivery is kept with the stored event, as W3C Trace Context writes it
// (traceparent and tracestate): each later delivery of the event to the
// application (an inbox attempt, a redelivery) is a span of its own, a
// child of that request's span and linked to it, and sends its own span
// context to the application. OpenTelemetry's API does the work; nothing
// here records or exports a span by itself.

// Field names of the trace context of a stored event.
const (
	FieldTraceParent = "traceparent" // 00-<trace id>-<span id>-<flags>
	FieldTraceState  = "tracestate"
)

// TracerName names the module's tracer, the instrumentation scope of
// every span it starts.
const TracerName = "github.com/webhookguard/caddy-webhook-idempotency"

// Trace is the span context of the request that accepted a delivery, as
// W3C Trace Context's traceparent and tracestate; zero when the request
// was not traced. It is a propagation.TextMapCarrier of its two fields.
type Trace struct {
	Parent string // traceparent; "" for none
	State  string // tracestate; "" for none
}

// TraceOf returns the trace of the span in ctx: zero unless it is
// recording.
func TraceOf(ctx context.Context) Trace {
	var t Trace
	if trace.SpanFromContext(ctx).IsRecording() {
		propagation.TraceContext{}.Inject(ctx, &t)
	}
	return t
}

// SpanContext returns the span context of the trace, remote; an invalid
// one when there is none.
func (t Trace) SpanContext() trace.SpanContext {
	if t.Parent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), &t))
}

// TraceID returns the trace's id in hex; "" for none.
func (t Trace) TraceID() string {
	if sc := t.SpanContext(); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// Get returns a field of the trace by its W3C header name.
func (t *Trace) Get(key string) string {
	switch key {
	case FieldTraceParent:
		return t.Parent
	case FieldTraceState:
		return t.State
	}
	return ""
}

// Set sets a field of the trace by its W3C header name.
func (t *Trace) Set(key, value string) {
	switch key {
	case FieldTraceParent:
		t.Parent = value
	case FieldTraceState:
		t.State = value
	}
}

// Keys returns the names of the trace's fields.
func (t *Trace) Keys() []string { return []string{FieldTraceParent, FieldTraceState} }

// The tracer of deliveries. Caddy's tracing handler keeps one
// TracerProvider for the process (its exporter set by the OTEL_*
// environment variables) and gives it to no one but the requests it
// traces: the request path hands it over (Tracer), and the deliveries,
// which run in the background, use the last one handed over.
var deliveries atomic.Pointer[tracerOf]

// tracerOf is a provider and the module's tracer of it.
type tracerOf struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

// Tracer returns the module's tracer of tp, the provider of a traced
// request's span, and makes it the tracer of the deliveries. It asks tp
// again only when the provider changed (a reload that replaced Caddy's
// tracing).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if t := deliveries.Load(); t != nil && t.provider == tp {
		return t.tracer
	}
	t := &tracerOf{provider: tp, tracer: tp.Tracer(TracerName)}
	deliveries.Store(t)
	return t.tracer
}

// StartDelivery starts the span of one delivery of an event to the
// application: a client span, a child of the span of the request that
// accepted the event and linked to it, with attrs. An event without a
// trace gets ctx as it is and a span that records nothing. Until the
// process has traced a request (Tracer), no tracer is known: the delivery
// is not recorded, but ctx carries the accepting request's span context,
// so the application's spans still join its trace.
func (t Trace) StartDelivery(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	sc := t.SpanContext()
	if !sc.IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	tr := deliveries.Load()
	if tr == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(trace.Link{SpanContext: sc}), trace.WithAttributes(attrs...))
}

// InjectTrace sets the traceparent and tracestate headers of h (W3C Trace
// Context) to the span context of ctx, in place of those stored with the
// event; it leaves h as it is when ctx has none.
func InjectTrace(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	h.Del("Traceparent")
	h.Del("Tracestate")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

var _ propagation.TextMapCarrier = (*Trace)(nil)
