package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestConsoleTraceLink: with Caddy's `tracing` on the route and the
// global trace_url set, an archived event carries the trace id of its
// request, as Caddy's tracing handler exported it: the admin API shows it
// (trace_id) with the viewer's URL (trace_url), and the console, in a real
// Chromium, shows it as a link to that URL. A redelivery to redeliver_to
// is a span linked to the archived request, whose context the application
// gets.
func TestConsoleTraceLink(t *testing.T) {
	sink := testkit.Traces(t)
	app := testkit.NewUpstream(t, nil)
	port, proxyPort := testkit.FreePort(t), testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%d {
	tracing
	webhook_idempotency {
		source payments
		store memory
		archive {
			redeliver_to %s/redelivered
		}
	}
	reverse_proxy %s
}`, port, app.URL, app.Addr())
	globals := "webhook_idempotency {\n\t\ttrace_url https://traces.example/trace/{trace_id}?org=ops\n\t}"
	c := testkit.StartCaddy(t, globals, sites+consoleProxySite(proxyPort, 0))
	if err := c.Reload(sites + consoleProxySite(proxyPort, c.AdminPort)); err != nil {
		t.Fatal(err)
	}
	resp, b := testkit.PostAfterReload(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"evt_traced"}`), "Idempotency-Key", "evt_traced")
	testkit.WantNew(t, resp, b, http.StatusOK)

	// the request's span, as exported
	var request testkit.Span
	testkit.WaitFor(t, 10*time.Second, "the request's spans", func() (bool, string) {
		spans := sink.Spans()
		for _, s := range spans {
			if s.Name == "webhook_idempotency.verify" {
				for _, p := range spans {
					if p.SpanID == s.Parent {
						request = p
						return true, ""
					}
				}
			}
		}
		return false, fmt.Sprint(len(spans), " spans")
	})

	var list struct {
		Events []struct {
			ID      string `json:"id"`
			TraceID string `json:"trace_id"`
		} `json:"events"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/payments/events", &list)
	if len(list.Events) != 1 || list.Events[0].TraceID != request.TraceID {
		t.Fatalf("archived events %+v, want one with the request's trace_id %s", list.Events, request.TraceID)
	}
	var one struct {
		TraceID  string `json:"trace_id"`
		TraceURL string `json:"trace_url"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/payments/events/"+list.Events[0].ID, &one)
	wantURL := "https://traces.example/trace/" + request.TraceID + "?org=ops"
	if one.TraceID != request.TraceID || one.TraceURL != wantURL {
		t.Fatalf("one event: trace_id %q trace_url %q, want %s %s", one.TraceID, one.TraceURL, request.TraceID, wantURL)
	}

	ctx := newBrowser(t)
	browse(t, ctx, "open the event in the console",
		chromedp.Navigate(fmt.Sprintf("http://127.0.0.1:%d/webhook_idempotency/console", proxyPort)),
		chromedp.WaitVisible(`#sources tbody tr[data-source="payments"]`),
		chromedp.Click(`#sources tbody tr[data-source="payments"]`),
		chromedp.WaitVisible(`#events tbody tr[data-id]`),
		chromedp.Click(`#events tbody tr[data-id]`),
		chromedp.WaitVisible(`#event-trace a`),
	)
	text := browserValue(t, ctx, "the trace link's text", chromedp.Text(`#event-trace a`))
	href := browserValue(t, ctx, "the trace link", chromedp.Evaluate[string](`document.querySelector('#event-trace a').href`))
	if strings.TrimSpace(text) != request.TraceID || href != wantURL {
		t.Fatalf("the console's trace link: %q to %q, want %q to %q", text, href, request.TraceID, wantURL)
	}

	// a redelivery to redeliver_to: its own span, linked to the request
	var out redeliveryOutcome
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/payments/events/"+list.Events[0].ID+"/redeliver", &out)
	if !out.Delivered {
		t.Fatalf("redelivery: %+v", out)
	}
	var redelivery testkit.Span
	testkit.WaitFor(t, 10*time.Second, "the redelivery's span", func() (bool, string) {
		for _, s := range sink.Spans() {
			if s.Name == "webhook_idempotency.redeliver" {
				redelivery = s
				return true, ""
			}
		}
		return false, ""
	})
	if len(redelivery.Links) != 1 || redelivery.Links[0] != (testkit.SpanLink{TraceID: request.TraceID, SpanID: request.SpanID}) ||
		redelivery.Parent != request.SpanID || redelivery.Attrs["http.response.status_code"] != "200" {
		t.Errorf("the redelivery's span: parent %s, links %v, attributes %v; want a child of %s linked to it", redelivery.Parent, redelivery.Links, redelivery.Attrs, request.SpanID)
	}
	reqs := app.Requests()
	if last := reqs[len(reqs)-1]; last.URI != "/redelivered" || last.Header.Get("Traceparent") != "00-"+request.TraceID+"-"+redelivery.SpanID+"-01" {
		t.Errorf("the application got the redelivery at %s with traceparent %q, want the redelivery span's %s", last.URI, last.Header.Get("Traceparent"), redelivery.SpanID)
	}
}
