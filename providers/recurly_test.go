package providers

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Recurly's Go client (recurly-client-go v4.48.0, webhook.go) is not on the
// module proxy and its test signs at time.Now(); its scheme is replayed
// with its test secret: `recurly-signature: <ms>,<sig>[,<sig>]`, each sig
// the HMAC-SHA256 hex of `{ms}.{body}` (`strconv.FormatInt(ts, 10) + "." +
// string(body)`), the secret as bytes, 5 minutes' tolerance.
func TestRecurly(t *testing.T) {
	const secret = "354fab5bd35f5a0d50845ee7e30165244468b13c2c343f104e4e730a59326d9d"
	body := []byte(`{"id":"rjxwmwedwqug","object_type":"account","site_id":"qfq8lyfcmhp0","event_type":"created","event_time":"2022-03-16T21:06:48Z","account_code":"e3a07fd8-2e6e-4d4d-8a96-8b6e7d1d3b2b"}`)
	rt := route{secrets: []string{secret}}
	sign := func(key string, at time.Time) string {
		ts := strconv.FormatInt(at.UnixMilli(), 10)
		return ts + "," + sigtest.HMACHex(key, ts, ".", string(body))
	}
	now := time.Now()
	rt.check(t, "recurly", post("recurly-signature", sign(secret, now)), body, nil)
	// two signatures while the endpoint's secret rotates
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	rt.check(t, "recurly", post("recurly-signature", ts+","+sigtest.HMACHex("old", ts, ".", string(body))+","+sigtest.HMACHex(secret, ts, ".", string(body))), body, nil)
	rt.check(t, "recurly", post("recurly-signature", sign("another", now)), body, signature.ErrInvalid)
	rt.check(t, "recurly", post("recurly-signature", sign(secret, now)), changeByte(body), signature.ErrInvalid)
	rt.check(t, "recurly", post("recurly-signature", sign(secret, now.Add(-6*time.Minute))), body, signature.ErrTimestamp)
	// seconds are not Recurly's unit
	s := strconv.FormatInt(now.Unix(), 10)
	rt.check(t, "recurly", post("recurly-signature", s+","+sigtest.HMACHex(secret, s, ".", string(body))), body, signature.ErrTimestamp)

	// the signer writes what the client reads
	signer, err := NewSigner("recurly", SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	if _, err := signer.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get("recurly-signature"); got != sign(secret, now) {
		t.Fatalf("signer wrote %q, want %q", got, sign(secret, now))
	}
}
