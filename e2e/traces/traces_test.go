// Package traces checks the module's traces under Caddy's own `tracing`
// handler, with a real OpenTelemetry SDK: Caddy's, whose exporter the
// environment sets (in memory for a Caddy in the test process, OTLP to a
// collector in the test for a Caddy process). The tests see what an
// operator's trace backend sees: the spans, their parents, links,
// attributes and events; and what the application sees: traceparent.
package traces

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// The test's secrets and keys: no span may carry them.
const (
	stripeSecret = "whsec_trace_secret_3f9a1c"
	eventKey     = "evt_trace_key_7d2e41"
)

// stripeBody is a Stripe event of id key.
func stripeBody(key string) []byte {
	return []byte(`{"id":"` + key + `","type":"invoice.paid","data":{"object":{"amount":1200}}}`)
}

// stripeSigned returns the Stripe-Signature of body, as Stripe signs it.
func stripeSigned(body []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: time.Now()}).Header
}

// app is the application: it answers with answer, given the request's
// number and traceparent, and records the traceparent of each request.
type app struct {
	*testkit.Upstream
	mu      sync.Mutex
	parents []string // in order of arrival
}

func newApp(t *testing.T, answer func(call int64, traceparent string) int) *app {
	a := &app{}
	a.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		tp := r.Header.Get("Traceparent")
		a.mu.Lock()
		a.parents = append(a.parents, tp)
		a.mu.Unlock()
		w.WriteHeader(answer(call, tp))
	})
	return a
}

func (a *app) traceparents() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.parents...)
}

// traceparentOf is the traceparent a span's context is sent as.
func traceparentOf(s testkit.Span) string { return "00-" + s.TraceID + "-" + s.SpanID + "-01" }

// byName returns the spans of a name, in the order they were exported.
func byName(spans []testkit.Span, name string) []testkit.Span {
	var out []testkit.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// childrenOf returns the spans whose parent is parent.
func childrenOf(spans []testkit.Span, parent testkit.Span) []testkit.Span {
	var out []testkit.Span
	for _, s := range spans {
		if s.Parent == parent.SpanID && s.TraceID == parent.TraceID {
			out = append(out, s)
		}
	}
	return out
}

// exported reports whether the span id is among spans.
func exported(spans []testkit.Span, id string) bool {
	for _, s := range spans {
		if s.SpanID == id {
			return true
		}
	}
	return false
}

// wantClean fails the test when a span carries the test's secret, key or
// signature, in any attribute, event, link or status.
func wantClean(t *testing.T, spans []testkit.Span, forbidden ...string) {
	t.Helper()
	for _, s := range spans {
		for _, f := range append([]string{stripeSecret, eventKey}, forbidden...) {
			if strings.Contains(s.Dump, f) {
				t.Errorf("span %s carries %q:\n%s", s.Name, f, s.Dump)
			}
		}
	}
}

// requestSpan returns Caddy's span of the request that has the module's
// span step among its children.
func requestSpan(t *testing.T, spans []testkit.Span, step testkit.Span) testkit.Span {
	t.Helper()
	for _, s := range spans {
		if s.SpanID == step.Parent && s.TraceID == step.TraceID {
			return s
		}
	}
	t.Fatalf("no exported span is the parent of %s (%s)", step.Name, step.Parent)
	return testkit.Span{}
}

// TestTraceRequestSpans: under Caddy's tracing handler, a new delivery is
// the spans verify, claim, app and complete, children of Caddy's span of
// the request, with the source, the key's kind and the result, and the
// application gets the app span's context; a duplicate is verify and
// claim (replayed), a forged delivery verify (invalid_signature). A route
// without `tracing` records nothing. No span carries the secret, the key
// or the signature.
func TestTraceRequestSpans(t *testing.T) {
	sink := testkit.Traces(t)
	upstream := newApp(t, func(int64, string) int { return http.StatusOK })
	traced, plain := testkit.FreePort(t), testkit.FreePort(t)
	t.Setenv("TRACE_TEST_STRIPE_SECRET", stripeSecret)
	testkit.StartCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	tracing
	webhook_idempotency stripe {
		secret {env.TRACE_TEST_STRIPE_SECRET}
	}
	reverse_proxy %s
}
http://127.0.0.1:%d {
	webhook_idempotency {
		source plain
		store memory
	}
	reverse_proxy %s
}`, traced, upstream.Addr(), plain, upstream.Addr()))

	body := stripeBody(eventKey)
	sig := stripeSigned(body)
	resp, rb := testkit.Post(t, testkit.SiteURL(traced)+"/stripe", body, "Stripe-Signature", sig)
	testkit.WantNew(t, resp, rb, http.StatusOK)
	resp, rb = testkit.Post(t, testkit.SiteURL(traced)+"/stripe", body, "Stripe-Signature", stripeSigned(body))
	testkit.WantReplay(t, resp, rb, http.StatusOK, "")
	forged := stripeBody("evt_forged")
	if resp, _ := testkit.Post(t, testkit.SiteURL(traced)+"/stripe", forged, "Stripe-Signature", sig); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged delivery: %s", resp.Status)
	}
	resp, rb = testkit.Post(t, testkit.SiteURL(plain)+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "plain-1")
	testkit.WantNew(t, resp, rb, http.StatusOK)

	// 4 (new) + 2 (replay) + 1 (forged) spans of the module, and Caddy's
	// span of each request (it ends last, and may come in a later batch)
	var spans []testkit.Span
	testkit.WaitFor(t, 10*time.Second, "the module's spans and their parents", func() (bool, string) {
		spans = sink.Spans()
		n, orphans := 0, 0
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "webhook_idempotency.") {
				n++
				if !exported(spans, s.Parent) {
					orphans++
				}
			}
		}
		return n == 7 && orphans == 0, fmt.Sprint(n, " spans, ", orphans, " without their parent")
	})

	verifies := byName(spans, "webhook_idempotency.verify")
	if len(verifies) != 3 {
		t.Fatalf("%d verify spans, want 3", len(verifies))
	}
	want := []struct {
		steps  []string
		result string
	}{
		{[]string{"verify", "claim", "app", "complete"}, "new"},
		{[]string{"verify", "claim"}, "replayed"},
		{[]string{"verify"}, "invalid_signature"},
	}
	for i, w := range want {
		req := requestSpan(t, spans, verifies[i])
		if req.Kind != "server" {
			t.Errorf("request %d: the steps' parent is a %s span %q, want Caddy's server span", i+1, req.Kind, req.Name)
		}
		var names []string
		for _, s := range childrenOf(spans, req) {
			names = append(names, strings.TrimPrefix(s.Name, "webhook_idempotency."))
			if s.Attrs["webhook.source"] != "stripe" {
				t.Errorf("request %d, %s: webhook.source %q", i+1, s.Name, s.Attrs["webhook.source"])
			}
			// every step carries the request's result, verify too (it
			// ends once the claim decides it)
			if s.Attrs["webhook.result"] != w.result {
				t.Errorf("request %d, %s: webhook.result %q, want %q", i+1, s.Name, s.Attrs["webhook.result"], w.result)
			}
			// the key is resolved in the verify step, once the signature
			// holds: every step of a verified delivery has its kind
			if w.result != "invalid_signature" && s.Attrs["webhook.key_kind"] != "json" {
				t.Errorf("request %d, %s: webhook.key_kind %q, want json (the stripe preset's json:id)", i+1, s.Name, s.Attrs["webhook.key_kind"])
			} else if k, ok := s.Attrs["webhook.key_kind"]; w.result == "invalid_signature" && ok {
				t.Errorf("request %d, %s: webhook.key_kind %q of a key never resolved", i+1, s.Name, k)
			}
		}
		if strings.Join(names, " ") != strings.Join(w.steps, " ") {
			t.Errorf("request %d: steps %v, want %v", i+1, names, w.steps)
		}
		// one step after the other: verify, which waits for the result
		// to end, ends when it did, before the claim starts
		steps := childrenOf(spans, req)
		for j, s := range steps {
			if s.End.Before(s.Start) || (j > 0 && s.Start.Before(steps[j-1].End)) {
				t.Errorf("request %d, %s: %s to %s, after a step that ended at %s", i+1, s.Name, s.Start, s.End, steps[max(j-1, 0)].End)
			}
		}
	}
	// the application's parent is the app step
	apps := byName(spans, "webhook_idempotency.app")
	if got := upstream.traceparents(); len(apps) != 1 || len(got) != 2 || got[0] != traceparentOf(apps[0]) {
		t.Errorf("the application got traceparent %q, want the app span's %v", got, apps)
	}
	// the route without tracing: its request reached the application with
	// no traceparent, and nothing of it was recorded
	if got := upstream.traceparents(); len(got) == 2 && got[1] != "" {
		t.Errorf("the untraced route's request carried traceparent %q", got[1])
	}
	for _, s := range spans {
		if s.Attrs["webhook.source"] == "plain" {
			t.Errorf("the untraced route recorded %s", s.Name)
		}
	}
	wantClean(t, spans, strings.TrimPrefix(sig, "t="))
}

// TestTraceInboxAttempts: an inbox event that fails twice and is then
// delivered is three attempt spans, each a child of the request that
// accepted the event and linked to it, with its number, outcome and
// status, a retry event on the first two; the application gets each
// attempt's own span id as traceparent. The archive keeps the request's
// trace id, which the admin API shows.
func TestTraceInboxAttempts(t *testing.T) {
	sink := testkit.Traces(t)
	upstream := newApp(t, func(call int64, _ string) int {
		if call <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	port := testkit.FreePort(t)
	t.Setenv("TRACE_TEST_STRIPE_SECRET", stripeSecret)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	tracing
	webhook_idempotency stripe {
		secret {env.TRACE_TEST_STRIPE_SECRET}
		archive
		inbox {
			deliver_to %s/hook
			retries 100ms 100ms 100ms
			jitter 0%%
		}
	}
}`, port, upstream.URL))

	body := stripeBody(eventKey)
	if resp, rb := testkit.Post(t, testkit.SiteURL(port)+"/stripe", body, "Stripe-Signature", stripeSigned(body)); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery: %s %s", resp.Status, rb)
	}
	var spans, attempts []testkit.Span
	testkit.WaitFor(t, 15*time.Second, "three attempt spans, and the accepting request's", func() (bool, string) {
		spans = sink.Spans()
		attempts = byName(spans, "webhook_idempotency.attempt")
		return len(attempts) == 3 && exported(spans, attempts[0].Parent), fmt.Sprint(len(attempts))
	})
	claim := byName(spans, "webhook_idempotency.claim")
	if len(claim) != 1 {
		t.Fatalf("%d claim spans, want the acceptance's", len(claim))
	}
	accepting := requestSpan(t, spans, claim[0])
	parents := upstream.traceparents()
	if len(parents) != 3 {
		t.Fatalf("the application got %d attempts, want 3", len(parents))
	}
	for i, a := range attempts {
		if a.Parent != accepting.SpanID || a.TraceID != accepting.TraceID || a.Kind != "client" {
			t.Errorf("attempt %d: a %s span, parent %s in trace %s; want a client span, child of the accepting request %s", i+1, a.Kind, a.Parent, a.TraceID, accepting.SpanID)
		}
		if len(a.Links) != 1 || a.Links[0] != (testkit.SpanLink{TraceID: accepting.TraceID, SpanID: accepting.SpanID}) {
			t.Errorf("attempt %d: links %v, want one to the accepting request %s", i+1, a.Links, accepting.SpanID)
		}
		if parents[i] != traceparentOf(a) {
			t.Errorf("attempt %d: the application got traceparent %q, want the attempt's %q", i+1, parents[i], traceparentOf(a))
		}
		wantOutcome, wantStatus, wantEvents := "retried", "500", 1
		if i == 2 {
			wantOutcome, wantStatus, wantEvents = "delivered", "200", 0
		}
		if a.Attrs["webhook.attempt"] != fmt.Sprint(i+1) || a.Attrs["webhook.outcome"] != wantOutcome ||
			a.Attrs["http.response.status_code"] != wantStatus || a.Attrs["webhook.source"] != "stripe" {
			t.Errorf("attempt %d: attributes %v", i+1, a.Attrs)
		}
		if len(a.Events) != wantEvents || (wantEvents == 1 && (a.Events[0].Name != "webhook_idempotency.retry_scheduled" || a.Events[0].Attrs["webhook.retry_due"] == "")) {
			t.Errorf("attempt %d: events %v", i+1, a.Events)
		}
	}
	wantClean(t, spans)

	// the archive's event carries the accepting request's trace id
	var list struct {
		Events []struct {
			ID      string `json:"id"`
			TraceID string `json:"trace_id"`
		} `json:"events"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/stripe/events", &list)
	if len(list.Events) != 1 || list.Events[0].TraceID != accepting.TraceID {
		t.Fatalf("archived events %+v, want one with trace_id %s", list.Events, accepting.TraceID)
	}
}

// TestTraceInboxRestart: the link survives a restart. A Caddy process
// accepts an event under `tracing` (file store) and its first attempt
// fails; it is killed; a second process on the same file delivers the
// event, and that attempt's span, exported by the second process, is a
// child of the first process's accepting request and linked to it. Every
// attempt the application got carried the accepting request's trace.
func TestTraceInboxRestart(t *testing.T) {
	collector := testkit.StartCollector(t)
	// the application fails every attempt until the second process is
	// up and knows the tracer, and then every attempt that is not
	// recorded: one the second process began before it knew the tracer
	// sends the accepting request's own context, and may reach the
	// application only after healthy is set (accepting is written before
	// healthy is set, and read only once it is)
	var healthy atomic.Bool
	var accepting testkit.Span
	upstream := newApp(t, func(_ int64, traceparent string) int {
		if healthy.Load() && traceparent != traceparentOf(accepting) {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	port := testkit.FreePort(t)
	t.Setenv("TRACE_TEST_STRIPE_SECRET", stripeSecret)
	sites := fmt.Sprintf(`
http://127.0.0.1:%d {
	tracing
	webhook_idempotency stripe {
		secret {env.TRACE_TEST_STRIPE_SECRET}
		store file %s
		inbox {
			deliver_to %s/hook
			retries 200ms 200ms 500ms 500ms 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s
			jitter 0%%
		}
	}
}`, port, t.TempDir()+"/store.db", upstream.URL)
	site := testkit.SiteURL(port)
	first := testkit.StartProcess(t, "", sites, site+"/ready")

	body := stripeBody(eventKey)
	if resp, rb := testkit.Post(t, site+"/stripe", body, "Stripe-Signature", stripeSigned(body)); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delivery: %s %s\n%s", resp.Status, rb, first.Log())
	}
	testkit.WaitFor(t, 15*time.Second, "the first process's attempt span", func() (bool, string) {
		spans := collector.Spans()
		claims, attempts := byName(spans, "webhook_idempotency.claim"), byName(spans, "webhook_idempotency.attempt")
		if len(claims) == 0 || len(attempts) == 0 {
			return false, fmt.Sprint(len(claims), " claims, ", len(attempts), " attempts")
		}
		for _, s := range spans {
			if s.SpanID == claims[0].Parent {
				accepting = s
			}
		}
		return accepting.SpanID != "", "no accepting span yet"
	})
	first.Kill()
	before := len(collector.Spans())

	// the second process learns the tracer of Caddy's tracing handler
	// from the first request it traces (the readiness probe); an attempt
	// before it is not recorded, and sends the accepting request's context
	second := testkit.StartProcess(t, "", sites, site+"/ready")
	// the provider's retry of the delivery: a duplicate, answered as the
	// acceptance was
	if resp, rb := testkit.Post(t, site+"/stripe", body, "Stripe-Signature", stripeSigned(body)); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the provider's retry: %s %s\n%s", resp.Status, rb, second.Log())
	}
	healthy.Store(true)
	var delivered testkit.Span
	testkit.WaitFor(t, 20*time.Second, "the second process's delivered attempt", func() (bool, string) {
		for _, s := range collector.Spans()[before:] {
			if s.Name == "webhook_idempotency.attempt" && s.Attrs["webhook.outcome"] == "delivered" {
				delivered = s
				return true, ""
			}
		}
		return false, second.Log()
	})
	if delivered.Parent != accepting.SpanID || delivered.TraceID != accepting.TraceID ||
		len(delivered.Links) != 1 || delivered.Links[0] != (testkit.SpanLink{TraceID: accepting.TraceID, SpanID: accepting.SpanID}) {
		t.Fatalf("after the restart, the attempt's parent %s, links %v; want the first process's accepting request %s", delivered.Parent, delivered.Links, accepting.SpanID)
	}
	parents := upstream.traceparents()
	if last := parents[len(parents)-1]; last != traceparentOf(delivered) {
		t.Errorf("the delivered attempt sent traceparent %q, want its own %q", last, traceparentOf(delivered))
	}
	for i, p := range parents {
		if !strings.HasPrefix(p, "00-"+accepting.TraceID+"-") {
			t.Errorf("attempt %d sent traceparent %q, outside the accepting request's trace %s", i+1, p, accepting.TraceID)
		}
	}
	wantClean(t, collector.Spans())
}
