package providers_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Microsoft Graph's endpoint validation, through a real Caddy: the token
// is answered at once, as text, before any clientState; notifications
// are checked item by item, and deduplicated one by one (docs/caddyfile.md:
// Batches): a batch of seen ones is answered replayed, a batch with a new
// one hands the application that one alone.
func TestGraphThroughCaddy(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	c, base := proxy(t, "webhook_idempotency graph {\n\t\tsecret client-state-1\n\t}", up)
	resp, got := testkit.Post(t, base+"/graph?validationToken=Validation%3A+Testing+reachability", nil, "Content-Type", "text/plain; charset=utf-8")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || string(got) != "Validation: Testing reachability" {
		t.Fatalf("the validation: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	wantMetric(t, c, 1, "caddy_webhook_idempotency_requests_total", "source", "graph", "result", "handshake")
	item := func(id, state string) string {
		return `{"id":"` + id + `","subscriptionId":"s1","changeType":"created","resource":"Users/1/Messages/` + id + `","clientState":"` + state + `"}`
	}
	body := []byte(`{"value":[` + item("n1", "client-state-1") + `,` + item("n2", "client-state-1") + `]}`)
	resp, first := testkit.Post(t, base+"/graph", body, "Content-Type", "application/json")
	testkit.WantNew(t, resp, first, http.StatusOK)
	resp, got = testkit.Post(t, base+"/graph", body, "Content-Type", "application/json")
	testkit.WantReplay(t, resp, got, http.StatusOK, "")
	resp, got = testkit.Post(t, base+"/graph", []byte(`{"value":[`+item("n3", "client-state-1")+`,`+item("n4", "guess")+`]}`), "Content-Type", "application/json")
	if resp.StatusCode != 401 {
		t.Fatalf("a forged notification among real ones: %d %s", resp.StatusCode, got)
	}
	up.WantCalls(t, 1)
	resp, got = testkit.Post(t, base+"/graph", []byte(`{"value":[`+item("n2", "client-state-1")+`,`+item("n5", "client-state-1")+`]}`), "Content-Type", "application/json")
	testkit.WantNew(t, resp, got, http.StatusOK)
	up.WantCalls(t, 2)
	if reqs := up.Requests(); string(reqs[1].Body) != `{"value":[`+item("n5", "client-state-1")+`]}` {
		t.Fatalf("a batch with one new notification: the application got %s", reqs[1].Body)
	}
}

// Azure Event Grid's subscription validation, through a real Caddy: with
// the endpoint's key it is answered with the validation code, without it
// refused; the CloudEvents schema's OPTIONS is granted at the edge; events
// reach the application once.
func TestEventGridThroughCaddy(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	c, base := proxy(t, "webhook_idempotency eventgrid {\n\t\tverify eventgrid {\n\t\t\tquery key\n\t\t\tsecret eg-key-1\n\t\t}\n\t}", up)
	validation := []byte(`[{"id":"2d1781af-3a4c-4d7c-bd0c-e34b19da4e66","topic":"/subscriptions/xx","subject":"","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6","validationUrl":"https://rp-eastus2.eventgrid.azure.net:553/eventsubscriptions/s/validate?id=1&token=x"},"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2026-12-06T10:00:00Z","metadataVersion":"1","dataVersion":"1"}]`)
	resp, got := testkit.Post(t, base+"/eg?key=wrong", validation, "Aeg-Event-Type", "SubscriptionValidation")
	if resp.StatusCode != 401 {
		t.Fatalf("a validation without the key: %d %s", resp.StatusCode, got)
	}
	resp, got = testkit.Post(t, base+"/eg?key=eg-key-1", validation, "Aeg-Event-Type", "SubscriptionValidation")
	if resp.StatusCode != 200 || string(got) != `{"validationResponse":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}` {
		t.Fatalf("the validation: %d %s", resp.StatusCode, got)
	}
	wantMetric(t, c, 1, "caddy_webhook_idempotency_requests_total", "source", "eventgrid", "result", "handshake")
	// the CloudEvents schema's validation: an OPTIONS granted with the
	// origin it asks for, before any key (it carries none)
	resp, got = testkit.Do(t, http.MethodOptions, base+"/eg", nil, "WebHook-Request-Origin", "eventgrid.azure.net", "WebHook-Request-Rate", "120")
	if resp.StatusCode != 200 || resp.Header.Get("WebHook-Allowed-Origin") != "eventgrid.azure.net" || resp.Header.Get("WebHook-Allowed-Rate") != "*" ||
		resp.Header.Get("Allow") != "POST" || len(got) != 0 {
		t.Fatalf("the CloudEvents validation: %d %v %q", resp.StatusCode, resp.Header, got)
	}
	wantMetric(t, c, 2, "caddy_webhook_idempotency_requests_total", "source", "eventgrid", "result", "handshake")
	// an OPTIONS without an origin is no handshake: passed on
	if resp, _ := testkit.Do(t, http.MethodOptions, base+"/eg", nil); resp.Header.Get("WebHook-Allowed-Origin") != "" {
		t.Fatalf("an OPTIONS without WebHook-Request-Origin granted: %v", resp.Header)
	}
	up.WantCalls(t, 1)
	event := []byte(`[{"topic":"/subscriptions/xx","subject":"/blobs/b.txt","eventType":"Microsoft.Storage.BlobCreated","eventTime":"2026-12-06T10:00:00Z","id":"831e1650-001e-001b-66ab-eeb76e069631","data":{},"dataVersion":"","metadataVersion":"1"}]`)
	resp, first := testkit.Post(t, base+"/eg?key=eg-key-1", event, "Aeg-Event-Type", "Notification")
	testkit.WantNew(t, resp, first, http.StatusOK)
	resp, got = testkit.Post(t, base+"/eg?key=eg-key-1", event, "Aeg-Event-Type", "Notification")
	testkit.WantReplay(t, resp, got, http.StatusOK, "")
	up.WantCalls(t, 2)
}
