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

// eventGridValidationEvent is the validation event as Event Grid's
// documentation shows it ("Endpoint validation with Event Grid events
// schema").
const eventGridValidationEvent = `[{"id":"2d1781af-3a4c-4d7c-bd0c-e34b19da4e66","topic":"/subscriptions/xx/resourceGroups/yy/providers/Microsoft.Storage/storageAccounts/zz",` +
	`"subject":"","data":{"validationCode":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6","validationUrl":"https://rp-eastus2.eventgrid.azure.net:553/eventsubscriptions/myeventsub/validate?id=0000000000-0000-0000-0000-00000000000000&t=2022-10-28T04:23:35.1981776Z&apiVersion=2018-05-01-preview&token=1A1A1A1A"},` +
	`"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","eventTime":"2022-10-28T04:23:35.1981776Z","metadataVersion":"1","dataVersion":"1"}]`

// eventGridEvent is a blob-created event of the Event Grid schema.
const eventGridEvent = `[{"topic":"/subscriptions/xx/resourceGroups/yy/providers/Microsoft.Storage/storageAccounts/zz","subject":"/blobServices/default/containers/c/blobs/b.txt",` +
	`"eventType":"Microsoft.Storage.BlobCreated","eventTime":"2026-12-06T10:00:00.000Z","id":"831e1650-001e-001b-66ab-eeb76e069631","data":{"api":"PutBlob"},"dataVersion":"","metadataVersion":"1"}]`

func TestEventGrid(t *testing.T) {
	inQuery := mustBuild(t, VerifyConfig{Scheme: "eventgrid", Query: "key", Secrets: []string{"old-key", "new-key"}})
	inHeader := mustBuild(t, VerifyConfig{Scheme: "eventgrid", Header: "Aeg-Delivery-Key", Secrets: []string{"new-key"}})
	for _, c := range []struct {
		name   string
		v      signature.Verifier
		target string
		header string
		want   *signature.Error
	}{
		{"the key in the query", inQuery, "/eg?key=new-key", "", nil},
		{"the old key, while rotating", inQuery, "/eg?key=old-key&tenant=a", "", nil},
		{"a wrong key", inQuery, "/eg?key=new-kez", "", signature.ErrInvalid},
		{"no key", inQuery, "/eg?other=new-key", "", signature.ErrMissing},
		{"the key in a header", inHeader, "/eg", "new-key", nil},
		{"a wrong header", inHeader, "/eg", "old-key", signature.ErrInvalid},
		{"the key in the query of a header route", inHeader, "/eg?key=new-key", "", signature.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, c.target, nil)
			if c.header != "" {
				r.Header.Set("Aeg-Delivery-Key", c.header)
			}
			sigtest.WantReason(t, c.v.Verify(r, []byte(eventGridEvent)), c.want)
		})
	}
	for _, cfg := range []VerifyConfig{
		{Scheme: "eventgrid", Secrets: []string{"k"}},
		{Scheme: "eventgrid", Secrets: []string{"k"}, Query: "key", Header: "X-Key"},
		{Scheme: "sendgrid", PublicKeys: []string{sendGridKey}, Query: "key"},
		{Scheme: "hmac", Header: "X-Sig", Secrets: []string{"k"}, Query: "sig"},
		{Scheme: "jwt", Secrets: []string{"k"}, Query: "token"},
	} {
		if _, err := buildVerifier(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
	if h, q := Credentials(VerifyConfig{Scheme: "eventgrid", Query: "key"}); len(h) != 0 || len(q) != 1 || q[0] != "key" {
		t.Fatalf("credentials %v %v", h, q)
	}
	// the generic token takes a query parameter as well
	generic := mustBuild(t, VerifyConfig{Scheme: "token", Query: "key", Secrets: []string{"new-key"}})
	sigtest.WantReason(t, generic.Verify(httptest.NewRequest(http.MethodPost, "/eg?key=new-key", nil), nil), nil)
	sigtest.WantReason(t, generic.Verify(httptest.NewRequest(http.MethodPost, "/eg?key=other", nil), nil), signature.ErrInvalid)
	if h, q := Credentials(VerifyConfig{Scheme: "token", Query: "key"}); len(h) != 0 || len(q) != 1 {
		t.Fatalf("the generic token's credentials %v %v", h, q)
	}

	// the validation event, once authenticated, is answered with its code
	hs, err := NewHandshake("eventgrid", HandshakeConfig{Verified: true})
	if err != nil || hs == nil || !hs.Signed() {
		t.Fatalf("eventgrid's handshake: %v %v", hs, err)
	}
	validation := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/eg?key=new-key", nil)
		r.Header.Set("Aeg-Event-Type", "SubscriptionValidation")
		return r
	}
	sigtest.WantReason(t, inQuery.Verify(validation(), []byte(eventGridValidationEvent)), nil)
	a, ok := hs.Answer(validation(), []byte(eventGridValidationEvent))
	if !ok || a.Status != 200 || a.ContentType != "application/json" || a.Body != `{"validationResponse":"512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}` {
		t.Fatalf("the validation: %+v %v", a, ok)
	}
	notification := httptest.NewRequest(http.MethodPost, "/eg?key=new-key", nil)
	notification.Header.Set("Aeg-Event-Type", "Notification")
	for _, c := range []struct {
		r    *http.Request
		body string
	}{
		{notification, eventGridValidationEvent},
		{validation(), eventGridEvent},
	} {
		if a, ok := hs.Answer(c.r, []byte(c.body)); ok {
			t.Errorf("answered %+v", a)
		}
	}

	// the signer puts the key where the route takes it
	s, err := NewSigner("eventgrid", SignConfig{Secret: "new-key", TokenQuery: "key"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/eg", nil)
	if _, err := s.Sign(r, []byte(eventGridEvent), time.Now()); err != nil || !strings.Contains(r.URL.RawQuery, "key=new-key") {
		t.Fatalf("signed %q: %v", r.URL.RawQuery, err)
	}
	sigtest.WantReason(t, inQuery.Verify(r, []byte(eventGridEvent)), nil)
	if _, err := NewSigner("eventgrid", SignConfig{Secret: "new-key"}); err == nil {
		t.Fatal("a signer without where the key goes")
	}
}

// TestCloudEventsPreflight: Event Grid's CloudEvents validation is an
// OPTIONS with a DNS name in WebHook-Request-Origin, granted with it; any
// other request, or an origin that is no DNS name, is no handshake.
func TestCloudEventsPreflight(t *testing.T) {
	hs, err := NewHandshake("eventgrid", HandshakeConfig{Verified: true})
	if err != nil || hs == nil {
		t.Fatalf("the eventgrid handshake: %v %v", hs, err)
	}
	req := func(method, origin string) *http.Request {
		r := httptest.NewRequest(method, "/eg", nil)
		if origin != "" {
			r.Header.Set("WebHook-Request-Origin", origin)
		}
		return r
	}
	a, ok := hs.AnswerBeforeBody(req(http.MethodOptions, "eventgrid.azure.net"))
	if !ok || a.Status != http.StatusOK || a.Header.Get("WebHook-Allowed-Origin") != "eventgrid.azure.net" ||
		a.Header.Get("WebHook-Allowed-Rate") != "*" || a.Header.Get("Allow") != http.MethodPost || a.Body != "" {
		t.Fatalf("the preflight: %+v %v", a, ok)
	}
	for _, r := range []*http.Request{
		req(http.MethodOptions, ""),
		req(http.MethodOptions, "evil.example\"><script>"),
		req(http.MethodOptions, strings.Repeat("a", 254)),
		req(http.MethodPost, "eventgrid.azure.net"),
	} {
		if a, ok := hs.AnswerBeforeBody(r); ok {
			t.Errorf("%s %q answered %+v", r.Method, r.Header.Get("WebHook-Request-Origin"), a)
		}
	}
}
