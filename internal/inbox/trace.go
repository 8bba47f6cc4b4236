package inbox

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Traces of the inbox (docs/operating.md: Traces): each delivery attempt
// of an event accepted by a traced request is a span of its own, a child
// of that request's span and linked to it (event.Trace, kept with the
// event, so across restarts and redeliveries), and the attempt sends its
// span context to the application as traceparent. Its outcome is on the
// span: a retry scheduled and a dead letter are span events. Nothing on
// the span says more than a status and a kind of reason: no key, no
// header value, no error text (which may hold deliver_to's URL).

// spanAttempt is the name of an attempt's span.
const spanAttempt = "webhook_idempotency.attempt"

// Attributes of an attempt's span and of its events.
const (
	attrSource  = attribute.Key("webhook.source")
	attrAttempt = attribute.Key("webhook.attempt")
	// attrOutcome is the attempt's outcome, as the outcome label of
	// caddy_webhook_idempotency_inbox_deliveries_total names it:
	// delivered, retried or dead_lettered.
	attrOutcome = attribute.Key("webhook.outcome")
	attrStatus  = attribute.Key("http.response.status_code")
	attrDue     = attribute.Key("webhook.retry_due") // RFC 3339
	attrReason  = attribute.Key("webhook.reason")    // why an event was dead-lettered, in a few words
)

// Events of an attempt's span.
const (
	eventRetry = "webhook_idempotency.retry_scheduled"
	eventDead  = "webhook_idempotency.dead_lettered"
)

// Outcomes of an attempt.
const (
	outcomeDelivered    = "delivered"
	outcomeRetried      = "retried"
	outcomeDeadLettered = "dead_lettered"
)

// Why an event was dead-lettered, as a dead letter's reason starts.
const (
	reasonRefused   = "permanent failure"
	reasonExhausted = "retries exhausted"
	reasonLoop      = "delivery loop"
)

// untraced is the span of an attempt of an event no traced request
// accepted: it records nothing.
var untraced = noop.Span{}

// startAttempt starts the span of an attempt of ev; an event without a
// trace gets a span that records nothing, at no cost.
func (ib *Inbox) startAttempt(ev *Event, attempt int) (context.Context, trace.Span) {
	if ev.Trace.Parent == "" {
		return context.Background(), untraced
	}
	return ev.Trace.StartDelivery(context.Background(), spanAttempt,
		attrSource.String(ib.cfg.Source), attrAttempt.Int(attempt))
}

// traceAttempt records an attempt's outcome on its span: status is the
// application's answer (0 when there was none); a retry carries when it is
// due, a dead letter why (reasonRefused, …).
func traceAttempt(span trace.Span, outcome string, status int, due time.Time, reason string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrOutcome.String(outcome))
	if status > 0 {
		span.SetAttributes(attrStatus.Int(status))
	}
	if outcome != outcomeDelivered {
		msg := "no answer"
		if status > 0 {
			msg = "HTTP " + strconv.Itoa(status)
		}
		span.SetStatus(codes.Error, msg)
	}
	switch outcome {
	case outcomeRetried:
		span.AddEvent(eventRetry, trace.WithAttributes(attrDue.String(due.UTC().Format(time.RFC3339Nano))))
	case outcomeDeadLettered:
		span.AddEvent(eventDead, trace.WithAttributes(attrReason.String(reason)))
	}
}

// traceUnrecorded marks an attempt whose outcome the queue did not
// record: the event is reclaimed and attempted again.
func traceUnrecorded(span trace.Span) {
	span.SetStatus(codes.Error, "recording the outcome failed; the event will be reclaimed")
}
