package providers

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// coinbaseSign is the v1 signature of Coinbase's CDP webhooks, as
// Coinbase's "Verify signatures" builds the signed payload
// (`{timestamp}.{headerNames}.{headerValues}.{body}`, names as `h` lists
// them, values joined by `.`) and Hook0's output worker signs it.
func coinbaseSign(secret string, r *http.Request, body []byte, at time.Time, names ...string) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	values := make([]string, len(names))
	for i, n := range names {
		values[i] = r.Header.Get(n)
	}
	h := strings.Join(names, " ")
	return "t=" + ts + ",h=" + h + ",v1=" + sigtest.HMACHex(secret, ts, ".", h, ".", strings.Join(values, "."), ".", string(body))
}

// TestCoinbase: Coinbase's CDP webhooks (Hook0's X-Hook0-Signature): v1
// over the headers `h` names verifies, X-Event-Id must be among them (the
// key is signed), a v0 alone is refused, and Hook0's published vector of a
// v1 over X-Event-Id and X-Event-Type verifies through the preset.
func TestCoinbase(t *testing.T) {
	const secret = "a-cdp-subscription-secret"
	body := []byte(`{"eventType":"payments.transfers.completed","data":{"transferId":"e5f1a0cb","amount":"1.5","asset":"usdc"}}`)
	v := mustBuild(t, VerifyConfig{Scheme: "coinbase", Secrets: []string{secret}})
	req := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/coinbase", nil)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Event-Id", "1a01cb48-5142-4d9b-8f90-d20cca61f0ee")
		r.Header.Set("X-Event-Type", "payments.transfers.completed")
		r.Header.Set("Custom-Header", "value")
		return r
	}
	now := time.Now()
	names := []string{"content-type", "custom-header", "x-event-id", "x-event-type"}
	r := req()
	r.Header.Set("X-Hook0-Signature", coinbaseSign(secret, r, body, now, names...))
	sigtest.WantReason(t, v.Verify(r, body), nil)
	sigtest.WantReason(t, v.Verify(r, append(body, ' ')), signature.ErrInvalid)
	r.Header.Set("X-Event-Id", "another-event")
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)

	r = req()
	r.Header.Set("X-Hook0-Signature", coinbaseSign("another secret", r, body, now, names...))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
	r = req()
	r.Header.Set("X-Hook0-Signature", coinbaseSign(secret, r, body, now.Add(-6*time.Minute), names...))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrTimestamp)
	// X-Event-Id left out of h: the key would not be signed
	r = req()
	r.Header.Set("X-Hook0-Signature", coinbaseSign(secret, r, body, now, "content-type", "x-event-type"))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
	// v0 covers no header
	r = req()
	ts := strconv.FormatInt(now.Unix(), 10)
	r.Header.Set("X-Hook0-Signature", "t="+ts+",v0="+sigtest.HMACHex(secret, ts, ".", string(body)))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
	r.Header.Del("X-Hook0-Signature")
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrMissing)

	// Hook0's output worker's vector (output-worker/src/work.rs), at its
	// time: secret, body `hello !`, 2021-11-15 00:30:00 UTC
	old := mustBuild(t, VerifyConfig{Scheme: "coinbase", Secrets: []string{"secret"}, Tolerance: caddy.Duration(time.Since(time.Unix(1636936200, 0)) + time.Minute)})
	r = httptest.NewRequest(http.MethodPost, "/coinbase", nil)
	r.Header.Set("X-Event-Id", "1a01cb48-5142-4d9b-8f90-d20cca61f0ee")
	r.Header.Set("X-Event-Type", "service.resource.verb")
	r.Header.Set("X-Hook0-Signature", "t=1636936200,v0=1b3d69df55f1e52f05224ba94a5162abeb17ef52cd7f4948c390f810d6a87e98,h=x-event-id x-event-type,v1=bc521546ba5de381b12f135782d2008b028c3065c191760b12b76850a8fc8f51")
	sigtest.WantReason(t, old.Verify(r, []byte("hello !")), nil)

	// the signer signs Content-Type, X-Event-Id and X-Event-Type as Hook0
	// does, making up an event id when there is none
	s, err := NewSigner("coinbase", SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	r = req()
	if _, err := s.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header.Get("X-Hook0-Signature"), coinbaseSign(secret, r, body, now, "content-type", "x-event-id", "x-event-type"); got != want {
		t.Fatalf("signer wrote %q, want %q", got, want)
	}
	sigtest.WantReason(t, v.Verify(r, body), nil)
	r = httptest.NewRequest(http.MethodPost, "/coinbase", nil)
	if _, err := s.Sign(r, body, now); err != nil || r.Header.Get("X-Event-Id") == "" {
		t.Fatalf("no event id made up: %v %v", r.Header, err)
	}
	sigtest.WantReason(t, v.Verify(r, body), nil)
	if !Resigns(VerifyConfig{Scheme: "coinbase", Secrets: []string{secret}}) {
		t.Error("forward cannot re-sign Coinbase's deliveries")
	}
	signed, bodySigned := SignedKeys("coinbase")
	if !bodySigned || len(signed) != 1 || signed[0] != "header:X-Event-Id" {
		t.Errorf("signed keys %q %v", signed, bodySigned)
	}
	wantPreset(t, "coinbase", []string{"header:X-Event-Id", "body"}, 8*day, nil)
}
