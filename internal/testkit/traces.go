package testkit

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// Traces, as Caddy's tracing handler exports them. Caddy's `tracing`
// keeps an OpenTelemetry SDK TracerProvider of its own, whose exporter it
// takes from the environment (OTEL_TRACES_EXPORTER, through
// go.opentelemetry.io/contrib/exporters/autoexport): a Caddy in the test
// process exports to an in-memory exporter (tracetest) registered with
// autoexport (Traces), a Caddy in a process of its own over OTLP/HTTP to a
// collector in the test (StartCollector). Both give the spans as Span.

// Span is an exported span, its ids in hex.
type Span struct {
	Name                   string
	TraceID, SpanID        string
	Parent                 string // the parent's span id; "" for a root
	Kind                   string // server, client, internal, …
	Attrs                  map[string]string
	Events                 []SpanEvent
	Links                  []SpanLink
	StatusCode, StatusDesc string
	Start, End             time.Time
	// Dump is the whole span as text, for searching it for what must not
	// be there.
	Dump string
}

// SpanEvent is an event of a span.
type SpanEvent struct {
	Name  string
	Attrs map[string]string
}

// SpanLink is a link of a span.
type SpanLink struct{ TraceID, SpanID string }

// testExporter is the name under which Traces registers its exporter with
// autoexport.
const testExporter = "webhook_idempotency_test"

var (
	registerOnce sync.Once
	// current is the in-memory exporter of the running test.
	current atomic.Pointer[tracetest.InMemoryExporter]
)

// exporter exports to the running test's in-memory exporter. Caddy shuts
// its provider's exporter down when its configuration stops: that does
// not empty the test's spans (tracetest's Shutdown would).
type exporter struct{}

func (exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e := current.Load(); e != nil {
		return e.ExportSpans(ctx, spans)
	}
	return nil
}

func (exporter) Shutdown(context.Context) error { return nil }

// SpanSink holds what Caddy exported in the test process.
type SpanSink struct{ mem *tracetest.InMemoryExporter }

// Traces makes the `tracing` handler of a Caddy started afterwards in the
// test process export to memory, each batch at once, and returns what it
// exports. It sets environment variables: the test must not run in
// parallel.
func Traces(t *testing.T) *SpanSink {
	t.Helper()
	registerOnce.Do(func() {
		autoexport.RegisterSpanExporter(testExporter, func(context.Context) (sdktrace.SpanExporter, error) {
			return exporter{}, nil
		})
	})
	mem := tracetest.NewInMemoryExporter()
	current.Store(mem)
	t.Cleanup(func() { current.CompareAndSwap(mem, nil) })
	t.Setenv("OTEL_TRACES_EXPORTER", testExporter)
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	return &SpanSink{mem: mem}
}

// Spans returns the spans exported so far.
func (s *SpanSink) Spans() []Span {
	var out []Span
	for _, st := range s.mem.GetSpans() {
		sp := Span{
			Name: st.Name, TraceID: st.SpanContext.TraceID().String(), SpanID: st.SpanContext.SpanID().String(),
			Kind: st.SpanKind.String(), Attrs: map[string]string{},
			StatusCode: st.Status.Code.String(), StatusDesc: st.Status.Description,
			Start: st.StartTime, End: st.EndTime,
			Dump: fmt.Sprintf("%+v", st),
		}
		if st.Parent.IsValid() {
			sp.Parent = st.Parent.SpanID().String()
		}
		for _, kv := range st.Attributes {
			sp.Attrs[string(kv.Key)] = kv.Value.String()
		}
		for _, e := range st.Events {
			ev := SpanEvent{Name: e.Name, Attrs: map[string]string{}}
			for _, kv := range e.Attributes {
				ev.Attrs[string(kv.Key)] = kv.Value.String()
			}
			sp.Events = append(sp.Events, ev)
		}
		for _, l := range st.Links {
			sp.Links = append(sp.Links, SpanLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String()})
		}
		out = append(out, sp)
	}
	return out
}

// Collector is an OTLP/HTTP trace receiver (protobuf) for a Caddy
// process: StartCollector points the processes the test starts
// afterwards at it.
type Collector struct {
	mu    sync.Mutex
	spans []Span
}

// StartCollector starts a collector and sets the OTEL_* environment
// variables that make a Caddy process started afterwards (StartProcess)
// export its traces to it, each batch at once. The test must not run in
// parallel.
func StartCollector(t *testing.T) *Collector {
	t.Helper()
	c := &Collector{}
	srv := httptest.NewServer(http.HandlerFunc(c.receive))
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	return c
}

// receive takes one export request.
func (c *Collector) receive(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, fmt.Sprintf("not an OTLP trace export: %v", err), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					Name: s.Name, TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Parent: hex.EncodeToString(s.ParentSpanId), Kind: s.Kind.String(), Attrs: attrs(s.Attributes),
					StatusCode: s.GetStatus().GetCode().String(), StatusDesc: s.GetStatus().GetMessage(),
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
					Dump: prototext.Format(s),
				}
				for _, e := range s.Events {
					sp.Events = append(sp.Events, SpanEvent{Name: e.Name, Attrs: attrs(e.Attributes)})
				}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, SpanLink{TraceID: hex.EncodeToString(l.TraceId), SpanID: hex.EncodeToString(l.SpanId)})
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// attrs returns OTLP attributes as strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = strconv.FormatBool(v.BoolValue)
		default:
			out[kv.Key] = prototext.Format(kv.GetValue())
		}
	}
	return out
}

// WaitSpans waits up to within for the spans spans() returns to hold one
// that match accepts for each of want names, and returns them, in the
// order of want. It fails the test with what it saw otherwise.
func WaitSpans(t testing.TB, within time.Duration, spans func() []Span, match func(Span) bool, want ...string) []Span {
	t.Helper()
	var found []Span
	WaitFor(t, within, fmt.Sprintf("spans %v", want), func() (bool, string) {
		found = found[:0]
		var names []string
		for _, name := range want {
			for _, s := range spans() {
				if s.Name == name && match(s) && !contains(found, s) {
					found = append(found, s)
					break
				}
			}
		}
		for _, s := range spans() {
			names = append(names, s.Name)
		}
		return len(found) == len(want), fmt.Sprint(names)
	})
	return found
}

func contains(spans []Span, s Span) bool {
	for _, o := range spans {
		if o.SpanID == s.SpanID {
			return true
		}
	}
	return false
}
