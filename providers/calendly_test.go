package providers

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// calendlySign is Calendly's scheme ("Webhook signatures"): the header
// `t=<t>,v1=<hex>`, v1 the HMAC-SHA256 of `<t>.<raw body>` under the
// signing key.
func calendlySign(key string, body []byte, at time.Time) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",v1=" + sigtest.HMACHex(key, ts, ".", string(body))
}

// TestCalendly: the header's t and v1 are read as its items; what
// Calendly's formula and stripe-go's signer of the same construction
// produce verifies; the tolerance covers Calendly's 24 hours of retries.
func TestCalendly(t *testing.T) {
	const key = "a-calendly-signing-key"
	body := []byte(`{"created_at":"2027-01-01T00:00:00.000000Z","created_by":"https://api.calendly.com/users/AAAA","event":"invitee.created","payload":{"cancel_url":"https://calendly.com/cancellations/AAAA","reschedule_url":"https://calendly.com/reschedulings/AAAA","name":"Zoë","uri":"https://api.calendly.com/scheduled_events/GBGBDCAADAEDCRZ2/invitees/AAAA"}}`)
	v := mustBuild(t, VerifyConfig{Scheme: "calendly", Secrets: []string{key}})
	req := func(sig string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/calendly", nil)
		if sig != "" {
			r.Header.Set("Calendly-Webhook-Signature", sig)
		}
		return r
	}
	now := time.Now()
	sigtest.WantReason(t, v.Verify(req(calendlySign(key, body, now)), body), nil)
	// stripe-go signs `t=…,v1=…` over `{t}.{body}` as Calendly does
	stripeSigned := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: key, Timestamp: now})
	sigtest.WantReason(t, v.Verify(req(stripeSigned.Header), body), nil)
	// the parameters in another order, with spaces
	ts := strconv.FormatInt(now.Unix(), 10)
	sigtest.WantReason(t, v.Verify(req("v1="+sigtest.HMACHex(key, ts, ".", string(body))+", t="+ts), body), nil)

	sigtest.WantReason(t, v.Verify(req(calendlySign("another key", body, now)), body), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(calendlySign(key, body, now)), append(body, ' ')), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(""), body), signature.ErrMissing)
	sigtest.WantReason(t, v.Verify(req("t="+ts), body), signature.ErrInvalid)
	sigtest.WantReason(t, v.Verify(req(strings.Replace(calendlySign(key, body, now), "t="+ts, "t="+strconv.FormatInt(now.Unix()-1, 10), 1)), body), signature.ErrInvalid)
	// a retry signed when the first attempt was, 23 hours ago, verifies;
	// a day and more, or ahead, does not
	sigtest.WantReason(t, v.Verify(req(calendlySign(key, body, now.Add(-23*time.Hour))), body), nil)
	sigtest.WantReason(t, v.Verify(req(calendlySign(key, body, now.Add(-25*time.Hour))), body), signature.ErrTimestamp)
	sigtest.WantReason(t, v.Verify(req(calendlySign(key, body, now.Add(25*time.Hour))), body), signature.ErrTimestamp)
	// a route's tolerance replaces the preset's
	strict := mustBuild(t, VerifyConfig{Scheme: "calendly", Secrets: []string{key}, Tolerance: caddy.Duration(5 * time.Minute)})
	sigtest.WantReason(t, strict.Verify(req(calendlySign(key, body, now.Add(-10*time.Minute))), body), signature.ErrTimestamp)

	// the preset's signer writes Calendly's header, which stripe-go accepts
	s, err := NewSigner("calendly", SignConfig{Secret: key})
	if err != nil {
		t.Fatal(err)
	}
	r := req("t=1,v1=stale")
	if _, err := s.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header.Get("Calendly-Webhook-Signature"), calendlySign(key, body, now); got != want {
		t.Fatalf("signer wrote %q, want %q", got, want)
	}
	if err := webhook.ValidatePayload(body, r.Header.Get("Calendly-Webhook-Signature"), key); err != nil {
		t.Fatalf("stripe-go refuses the signer's header: %v", err)
	}
	if !Resigns(VerifyConfig{Scheme: "calendly", Secrets: []string{key}}) {
		t.Error("forward cannot re-sign calendly")
	}
	if h, _ := Credentials(VerifyConfig{Scheme: "calendly"}); len(h) != 1 || h[0] != "Calendly-Webhook-Signature" {
		t.Errorf("credentials %q", h)
	}
	wantPreset(t, "calendly", []string{"body"}, 0, []string{"json:payload.cancel_url", "json:payload.reschedule_url"})
}

// TestBlockTimestampField: a block whose string signs {timestamp} and
// says nowhere where the timestamp is cannot be built, and the error says
// why.
func TestBlockTimestampField(t *testing.T) {
	bad, err := parseDeclaration("template {\n string \"{timestamp}.{body}\"\n algorithm hmac-sha256\n signature header:X separator , prefix v1=\n}")
	if err != nil {
		t.Fatal(err)
	}
	bad.Secrets = []string{"k"}
	if _, err := buildVerifier(bad); err == nil || !strings.Contains(err.Error(), "{timestamp} needs a timestamp") {
		t.Errorf("{timestamp} without a timestamp: %v", err)
	}
}
