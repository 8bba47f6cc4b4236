package inbox

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Each attempt of an event a traced request accepted is a span with a
// real OpenTelemetry SDK, on both queues: a child of the accepting span
// and linked to it, its outcome and its retries or dead letter on it, and
// its own span id in the traceparent the application gets; a redelivered
// dead letter's attempts link to the same request.

// attemptSpans returns the ended attempt spans linked to the span acc.
func attemptSpans(rec *tracetest.SpanRecorder, acc trace.SpanContext) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == spanAttempt && len(s.Links()) == 1 && s.Links()[0].SpanContext.SpanID() == acc.SpanID() {
			out = append(out, s)
		}
	}
	return out
}

func TestInboxAttemptsAreSpansLinkedToTheAcceptingRequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	event.Tracer(tp) // as a traced request hands it over

	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			// "flaky" fails twice, then is delivered; "refused" is refused
			// (dead-lettered), then, redelivered, delivered
			app := newRecorder(t, func(key string, n int) int {
				switch {
				case key == "flaky" && n <= 2:
					return http.StatusInternalServerError
				case key == "refused" && n == 1:
					return http.StatusUnprocessableEntity
				}
				return http.StatusOK
			})
			ib := newOrderedInbox(t, s, "traced-"+name, app.URL, func(c *Config) {
				c.Retries = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 50 * time.Millisecond}
			})
			ib.Start()

			accepting := map[string]trace.SpanContext{}
			for _, key := range []string{"flaky", "refused"} {
				ctx, span := tp.Tracer("caddy").Start(context.Background(), "handler")
				body := []byte(`{"id":"` + key + `"}`)
				hash := sha256.Sum256(body)
				ev := event.Request{Source: ib.Source(), Key: key, StoreKey: "idem:" + ib.Source() + ":" + key, Method: "POST", URI: "/hook",
					// as Caddy's tracing handler leaves the request's headers
					Headers: "Traceparent: stale\r\nContent-Type: application/json\r\n", Body: body, Received: time.Now(),
					Trace: event.TraceOf(ctx)}
				if res, err := ib.Accept(t.Context(), store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, &hash, &ev); err != nil || res.State != store.StateClaimed {
					t.Fatalf("accepting %s: %v %v", key, res.State, err)
				}
				span.End()
				accepting[key] = span.SpanContext()
			}

			testkit.WaitFor(t, 10*time.Second, "flaky's three attempts", func() (bool, string) {
				n := len(attemptSpans(rec, accepting["flaky"]))
				return n == 3, strings.Repeat("x", n)
			})
			spans := attemptSpans(rec, accepting["flaky"])
			var parents []string
			for _, r := range app.Upstream.Requests() {
				if r.Header.Get("Idempotency-Key") == "flaky" {
					parents = append(parents, r.Header.Get("Traceparent"))
				}
			}
			if len(parents) != 3 {
				t.Fatalf("the application got %d attempts of flaky, want 3", len(parents))
			}
			for i, sp := range spans {
				acc := accepting["flaky"]
				if sp.Parent().SpanID() != acc.SpanID() || sp.SpanContext().TraceID() != acc.TraceID() {
					t.Errorf("attempt %d: parent %v in trace %v, want the accepting span %v", i+1, sp.Parent().SpanID(), sp.SpanContext().TraceID(), acc.SpanID())
				}
				want := "00-" + acc.TraceID().String() + "-" + sp.SpanContext().SpanID().String() + "-01"
				if parents[i] != want {
					t.Errorf("attempt %d: the application got traceparent %q, want the attempt's %s", i+1, parents[i], want)
				}
				attrs := map[string]string{}
				for _, kv := range sp.Attributes() {
					attrs[string(kv.Key)] = kv.Value.String()
				}
				wantOutcome, wantStatus, wantEvent := "retried", "500", eventRetry
				if i == 2 {
					wantOutcome, wantStatus, wantEvent = "delivered", "200", ""
				}
				if attrs["webhook.attempt"] != string(rune('1'+i)) || attrs["webhook.outcome"] != wantOutcome ||
					attrs["http.response.status_code"] != wantStatus || attrs["webhook.source"] != ib.Source() {
					t.Errorf("attempt %d: attributes %v", i+1, attrs)
				}
				var events []string
				for _, e := range sp.Events() {
					events = append(events, e.Name)
				}
				if strings.Join(events, ",") != wantEvent {
					t.Errorf("attempt %d: events %v, want %q", i+1, events, wantEvent)
				}
			}

			// refused: dead-lettered, a span event; redelivered from the
			// dead letters, its next attempt links to the same request
			testkit.WaitFor(t, 10*time.Second, "refused dead-lettered", func() (bool, string) {
				dl, err := ib.DeadLetters(t.Context(), "", "-", 10)
				return err == nil && len(dl) == 1, ""
			})
			dl, _ := ib.DeadLetters(t.Context(), "", "-", 10)
			if dl[0].TraceID != accepting["refused"].TraceID().String() {
				t.Errorf("dead letter's trace_id %q, want %s", dl[0].TraceID, accepting["refused"].TraceID())
			}
			first := attemptSpans(rec, accepting["refused"])
			if len(first) != 1 || len(first[0].Events()) != 1 || first[0].Events()[0].Name != eventDead {
				t.Fatalf("refused's attempt: %d spans, want one with a dead letter event", len(first))
			}
			if ev := first[0].Events()[0]; len(ev.Attributes) != 1 || ev.Attributes[0].Value.AsString() != "permanent failure" {
				t.Errorf("dead letter event attributes %v, want its reason's kind", ev.Attributes)
			}
			if _, err := ib.Redeliver(t.Context(), "", dl[0].ID); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the redelivered attempt", func() (bool, string) {
				return len(attemptSpans(rec, accepting["refused"])) == 2, ""
			})
			again := attemptSpans(rec, accepting["refused"])[1]
			if again.Parent().SpanID() != accepting["refused"].SpanID() {
				t.Errorf("the redelivered attempt's parent %v, want the accepting span %v", again.Parent().SpanID(), accepting["refused"].SpanID())
			}
		})
	}
}
