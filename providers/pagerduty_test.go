package providers

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/PagerDuty/go-pagerduty/webhookv3"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// PagerDuty's Go client (go-pagerduty v1.8.0, webhookv3.VerifySignature) is
// the oracle: the preset accepts exactly the X-PagerDuty-Signature values it
// accepts.
func TestPagerDuty(t *testing.T) {
	const secret = "pd-subscription-secret"
	body := []byte(`{"event":{"id":"01DEN4HPBQAP1AU2ONO8YQ6ENV","event_type":"incident.triggered","resource_type":"incident","occurred_at":"2026-01-01T00:00:00.000Z","agent":null,"client":null,"data":{"id":"PGR0VU2","type":"incident","title":"A little bump in the road"}}}`)
	good, other := "v1="+sigtest.HMACHex(secret, string(body)), "v1="+sigtest.HMACHex("old-secret", string(body))
	rt := route{secrets: []string{secret}}
	for _, c := range []struct {
		header string
		body   []byte
	}{
		{good, body},
		{other + "," + good, body},
		{"v2=abcdef," + good, body},
		{other, body},
		{good, changeByte(body)},
		{"v1=zz," + good, body},
		{sigtest.HMACHex(secret, string(body)), body},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/hook", bytes.NewReader(c.body))
		r.Header.Set("X-PagerDuty-Signature", c.header)
		want := signature.ErrInvalid
		if webhookv3.VerifySignature(r, secret) == nil {
			want = nil
		}
		body, _ := io.ReadAll(r.Body)
		rt.check(t, "pagerduty", post("X-PagerDuty-Signature", c.header), body, want)
	}
	rt.check(t, "pagerduty", post(), body, signature.ErrMissing)
	if k := keyOf(t, "pagerduty", post(), body); k != "json:event.id=01DEN4HPBQAP1AU2ONO8YQ6ENV" {
		t.Fatalf("key %q", k)
	}
}
