package providers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// graphNotification is a change notification as Microsoft Graph documents
// it (changeNotification resource type, example), with its clientState.
func graphNotification(id, clientState string) string {
	return `{"id":"` + id + `","subscriptionId":"76619225-ff6b-4aa7-8b7a-a6bd2d5a8e8e","subscriptionExpirationDateTime":"2026-12-08T11:00:00.0000000Z",` +
		`"clientState":"` + clientState + `","changeType":"created","resource":"Users/b5d16d17-9b5c-4b4f-9d3e-a7a5b9c1a111/Messages/AAMkAGUw",` +
		`"tenantId":"84bd8158-6d4d-4958-8b9f-9d6445542f95","resourceData":{"@odata.type":"#Microsoft.Graph.Message","@odata.id":"Users/b5d16d17/Messages/AAMkAGUw","@odata.etag":"W/\"CQAAABYAAADkrWGo7bouTKlsgTZMr9KwAAAUWRHf\"","id":"AAMkAGUw"}}`
}

func graphBody(items ...string) []byte {
	return []byte(`{"value":[` + strings.Join(items, ",") + `]}`)
}

func TestGraph(t *testing.T) {
	v := mustBuild(t, VerifyConfig{Scheme: "graph", Secrets: []string{"secretClientValue", "nextClientValue"}})
	post := func() *http.Request { return httptest.NewRequest(http.MethodPost, "/graph", nil) }
	for _, c := range []struct {
		name string
		body []byte
		want *signature.Error
	}{
		{"one", graphBody(graphNotification("n1", "secretClientValue")), nil},
		{"two subscriptions, rotating", graphBody(graphNotification("n1", "secretClientValue"), graphNotification("n2", "nextClientValue")), nil},
		{"a wrong clientState", graphBody(graphNotification("n1", "secretClientValuf")), signature.ErrInvalid},
		{"one wrong among right ones", graphBody(graphNotification("n1", "secretClientValue"), graphNotification("n2", "guess")), signature.ErrInvalid},
		{"no clientState", graphBody(strings.Replace(graphNotification("n1", "x"), `"clientState":"x",`, "", 1)), signature.ErrMissing},
		{"a clientState outside the items", []byte(`{"clientState":"secretClientValue","value":[` + graphNotification("n1", "guess") + `]}`), signature.ErrInvalid},
		{"no notifications", graphBody(), signature.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) { sigtest.WantReason(t, v.Verify(post(), c.body), c.want) })
	}

	// the validation request, answered before the body is read
	hs, err := NewHandshake("graph", HandshakeConfig{Verified: true})
	if err != nil || hs == nil || hs.Signed() {
		t.Fatalf("graph's handshake: %v %v", hs, err)
	}
	r := httptest.NewRequest(http.MethodPost, "/graph?validationToken=Validation%3A+Testing+client+application+reachability+for+subscription+Request-Id%3A+a1b2", nil)
	r.Header.Set("Content-Type", "text/plain; charset=utf-8")
	a, ok := hs.Answer(r, nil)
	if !ok || a.Status != http.StatusOK || a.ContentType != "text/plain" || a.Body != "Validation: Testing client application reachability for subscription Request-Id: a1b2" {
		t.Fatalf("the validation: %+v %v", a, ok)
	}
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/graph?validationToken=abc", nil),
		httptest.NewRequest(http.MethodPost, "/graph", nil),
		httptest.NewRequest(http.MethodPost, "/graph?validationToken=", nil),
	} {
		if a, ok := hs.Answer(r, nil); ok {
			t.Errorf("%s %s answered %+v", r.Method, r.URL, a)
		}
	}
	// nothing to configure: no verify_token; off passes it on
	if err := CheckHandshakeOptions("graph", "", "tok"); err == nil {
		t.Fatal("graph took a verify_token")
	}
	if hs, _ := NewHandshake("graph", HandshakeConfig{Mode: HandshakeOff}); hs != nil {
		t.Fatal("handshake off answered")
	}

	// the signer writes the clientState into each notification
	s, err := NewSigner("graph", SignConfig{Secret: "secretClientValue"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Sign(post(), graphBody(graphNotification("n1", ""), graphNotification("n2", "")), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), `"clientState":"secretClientValue"`) != 2 {
		t.Fatalf("signed %s", out)
	}
	sigtest.WantReason(t, v.Verify(post(), out), nil)
}
