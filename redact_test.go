package webhookidempotency

import (
	"net/http"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// A route's redaction as the handler wires it: the secret headers of its
// verify scheme and the key sources it keeps. The rules themselves are
// tested in internal/redact; what the admin API shows of a stored event,
// in e2e (TestAdminDeadLettersAreRedacted).

// TestRedactorShows: a route's redactor replaces the values of the
// credential headers (named, the route's token header, or with a name
// that looks like a credential's) and of the secret-looking query
// parameters; signature headers and the route's key sources are kept.
func TestRedactorShows(t *testing.T) {
	t.Parallel()
	keys, err := parseKeySources([]string{"header:I-Twilio-Idempotency-Token", "query:session_id", "body"})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Verify: &providers.VerifyConfig{Scheme: "token", Header: "x-hook-auth"}, keys: keys}
	rd, err := h.redactor(nil)
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{
		"Authorization":              {"Bearer s1"},
		"Proxy-Authorization":        {"Basic s2"},
		"Cookie":                     {"session=s3", "b=s4"},
		"X-Api-Key":                  {"s5"},
		"X-Gitlab-Token":             {"s6"},
		"Asaas-Access-Token":         {"s7"},
		"X-Hook-Auth":                {"s8"}, // the route's verify token header
		"Content-Type":               {"application/json"},
		"X-Github-Delivery":          {"d1"},
		"Idempotency-Key":            {"k1"},
		"X-Hub-Signature-256":        {"sha256=ab"},
		"I-Twilio-Idempotency-Token": {"k2"}, // the route's key
	}
	uri := rd.URI("/in?api_key=s9&x=1&Token=s10&a%2Ekey=s11&hub.verify_token=s12&data.id=7&password&id=2&sig=s13&session_id=k3#frag")
	if want := "/in?api_key=[redacted]&x=1&Token=[redacted]&a%2Ekey=s11&hub.verify_token=[redacted]&data.id=7&password&id=2&sig=[redacted]&session_id=k3#frag"; uri != want {
		t.Errorf("uri:\n%s\nwant\n%s", uri, want)
	}
	got := rd.Header(header)
	kept := map[string]bool{"Content-Type": true, "X-Github-Delivery": true, "Idempotency-Key": true, "X-Hub-Signature-256": true, "I-Twilio-Idempotency-Token": true}
	for name, values := range got {
		for i, v := range values {
			if !kept[name] && v != redact.Value {
				t.Errorf("%s: %q not redacted", name, v)
			}
			if kept[name] && v != header[name][i] {
				t.Errorf("%s: %q changed to %q", name, header[name][i], v)
			}
		}
	}
	if len(got["Cookie"]) != 2 || header.Get("Authorization") != "Bearer s1" {
		t.Errorf("values counted wrong, or the original modified: %v / %v", got, header)
	}
	if uri := rd.URI("/plain"); uri != "/plain" {
		t.Errorf("nothing to redact: %q", uri)
	}
	var nilRedactor *redact.Redactor
	if uri := nilRedactor.URI("/in?token=t"); uri != "/in?token=t" {
		t.Errorf("a nil redactor redacts %q", uri)
	}
}

// TestEventGridCredentialsRedacted: what authenticates Event Grid never
// reaches the archive or the logs: the key in the query parameter or the
// header the route names, whatever its name, Event Grid's own access key
// and SAS token headers and query parameter (aeg-sas-key, aeg-sas-token;
// "Authenticate Azure Event Grid clients using access keys or shared
// access signatures"), an Azure Functions key (code), and the validation
// URL's token in a SubscriptionValidationEvent.
func TestEventGridCredentialsRedacted(t *testing.T) {
	t.Parallel()
	for _, verify := range []*providers.VerifyConfig{
		{Scheme: "eventgrid", Query: "tenant_ref"},
		{Scheme: "eventgrid", Header: "X-Eg-Client"},
	} {
		h := &Handler{Provider: "eventgrid", Verify: verify}
		rd, err := h.redactor(nil)
		if err != nil {
			t.Fatal(err)
		}
		uri := rd.URI("/eg?tenant_ref=s1&aeg-sas-key=s2&code=s3&aeg-sas-token=s4&topic=t")
		if verify.Query == "" {
			uri = strings.Replace(uri, "tenant_ref=s1", "tenant_ref=[redacted]", 1) // not the route's
		}
		if want := "/eg?tenant_ref=[redacted]&aeg-sas-key=[redacted]&code=[redacted]&aeg-sas-token=[redacted]&topic=t"; uri != want {
			t.Errorf("%+v: uri\n%s\nwant\n%s", verify, uri, want)
		}
		got := rd.Header(http.Header{"Aeg-Sas-Key": {"s5"}, "Aeg-Sas-Token": {"s6"}, "X-Eg-Client": {"s7"}, "Aeg-Event-Type": {"Notification"}})
		for _, name := range []string{"Aeg-Sas-Key", "Aeg-Sas-Token", "X-Eg-Client"} {
			if name == "X-Eg-Client" && verify.Header == "" {
				continue
			}
			if got.Get(name) != redact.Value {
				t.Errorf("%+v: %s kept: %q", verify, name, got.Get(name))
			}
		}
		if got.Get("Aeg-Event-Type") != "Notification" {
			t.Errorf("aeg-event-type redacted")
		}
		body, _, err := rd.Body([]byte(`[{"id":"1","eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","data":{"validationCode":"c","validationUrl":"https://rp-eastus2.eventgrid.azure.net:553/eventsubscriptions/s/validate?id=1&token=s8"}}]`))
		if err != nil || strings.Contains(string(body), "s8") {
			t.Errorf("the validation URL kept: %s %v", body, err)
		}
	}
}
