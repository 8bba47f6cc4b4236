package webhookidempotency

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// Traces (docs/operating.md: Traces). With Caddy's `tracing` handler on
// the route, the request's context holds the span it started for the
// request; each step of a delivery is a child span of it, started with
// OpenTelemetry's API from that span's own provider: verify (the
// signature, a handshake, the key), claim (the store's round trip, or the
// inbox's acceptance), app (the next handler) and complete (the answer
// recorded, or the key released). A request whose context holds no
// recording span (no `tracing` on the route, or a request not sampled)
// has no trace, and each step's call costs a nil check.

// Names of the steps' spans.
const (
	spanVerify   = "webhook_idempotency.verify"
	spanClaim    = "webhook_idempotency.claim"
	spanApp      = "webhook_idempotency.app"
	spanComplete = "webhook_idempotency.complete"
)

// Attributes of the steps' spans: never a key, a body, a header value or a
// secret.
const (
	attrSource  = attribute.Key("webhook.source")
	attrResult  = attribute.Key("webhook.result")   // as the result placeholder, once known
	attrKeyKind = attribute.Key("webhook.key_kind") // header, json, query or body, once resolved
)

// requestTrace is a traced request: the request's context, which holds
// Caddy's span, and the span of the step in progress.
type requestTrace struct {
	ctx    context.Context
	tracer trace.Tracer
	step   trace.Span // nil between steps
	result string     // the request's result, once set
	attrs  [3]attribute.KeyValue
	// waiting is a step that ended before the result was known (verify,
	// before the claim decides it), at ended: it is ended once the result
	// is set, with the result and at that time, or at the request's end
	waiting trace.Span
	ended   time.Time
}

// startTrace gives the request a trace when its context holds a recording
// span, and hands that span's provider to the inbox's deliveries
// (event.Tracer).
func (rs *requestState) startTrace() {
	ctx := rs.r.Context()
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	rs.trace = &requestTrace{ctx: ctx, tracer: event.Tracer(span.TracerProvider())}
}

// traceStep ends the step in progress and starts the span of the next one.
// The app step's span is the next handler's: its context is the request's,
// and the request carries it as traceparent (W3C Trace Context).
func (rs *requestState) traceStep(name string) {
	t := rs.trace
	if t == nil {
		return
	}
	t.end()
	attrs := append(t.attrs[:0], attrSource.String(rs.h.Source))
	if rs.keyKind != 0 {
		attrs = append(attrs, attrKeyKind.String(rs.keyKind.name()))
	}
	if t.result != "" {
		attrs = append(attrs, attrResult.String(t.result))
	}
	var ctx context.Context
	ctx, t.step = t.tracer.Start(t.ctx, name)
	t.step.SetAttributes(attrs...)
	if name == spanApp {
		rs.r = rs.r.WithContext(ctx)
		rs.r.Header.Del("Tracestate")
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(rs.r.Header))
	}
}

// traceResult sets the request's result on the step in progress and on
// those that follow.
func (rs *requestState) traceResult(result string) {
	if t := rs.trace; t != nil {
		t.result = result
		if t.step != nil {
			t.step.SetAttributes(attrResult.String(result))
		}
		if t.waiting != nil {
			t.waiting.SetAttributes(attrResult.String(result))
			t.endWaiting()
		}
	}
}

// traceKeyKind sets the key's kind on the step in progress, the one that
// resolved the key (verify); the steps after it carry it from their start.
func (rs *requestState) traceKeyKind() {
	if t := rs.trace; t != nil && t.step != nil {
		t.step.SetAttributes(attrKeyKind.String(rs.keyKind.name()))
	}
}

// traceEnd ends the step in progress, and one still waiting for the
// result.
func (rs *requestState) traceEnd() {
	if t := rs.trace; t != nil {
		t.end()
		t.endWaiting()
	}
}

// end ends the step in progress; one that ends before the result is known
// waits for it (traceResult), so that every step carries the result.
func (t *requestTrace) end() {
	if t.step == nil {
		return
	}
	if t.result == "" && t.waiting == nil {
		t.waiting, t.ended = t.step, time.Now()
	} else {
		t.step.End()
	}
	t.step = nil
}

// endWaiting ends the step waiting for the result at the time it ended.
func (t *requestTrace) endWaiting() {
	if t.waiting != nil {
		t.waiting.End(trace.WithTimestamp(t.ended))
		t.waiting = nil
	}
}

// traceContext is the span context of the request's span, kept with its
// inbox event and its archived event; zero when it is not traced.
func (rs *requestState) traceContext() event.Trace {
	if rs.trace == nil {
		return event.Trace{}
	}
	return event.TraceOf(rs.trace.ctx)
}

// name is the kind's name, as the key's source writes it.
func (k keyKind) name() string {
	switch k {
	case keyHeader:
		return "header"
	case keyJSON:
		return "json"
	case keyQuery:
		return "query"
	case keyBody:
		return "body"
	}
	return ""
}
