package providers

import (
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Persona's documentation ("Webhook best practices", checking signatures)
// gives the scheme in Ruby: `OpenSSL::HMAC.hexdigest('SHA256', secret,
// "#{t}.#{body}")` against `v1` of `Persona-Signature: t=…,v1=…`, and, while
// a secret rotates, "two space-separated sets of the key-value pairs".
func TestPersona(t *testing.T) {
	const secret, old = "wbhsec_new", "wbhsec_old"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"data":{"type":"event","id":"evt_ZUShTWJjiHC5KsLMs7crM2jv","attributes":{"name":"inquiry.completed","created-at":"2026-01-01T00:00:00.000Z","payload":{"data":{"type":"inquiry","id":"inq_1"}}}}}`)
	set := func(key string, at time.Time) string {
		ts := strconv.FormatInt(at.Unix(), 10)
		return "t=" + ts + ",v1=" + sigtest.HMACHex(key, ts, ".", string(body))
	}
	now := time.Now()
	rt.check(t, "persona", post("Persona-Signature", set(secret, now)), body, nil)
	rt.check(t, "persona", post("Persona-Signature", set(old, now)+" "+set(secret, now.Add(-time.Second))), body, nil)
	rt.check(t, "persona", post("Persona-Signature", set(old, now)+" "+set("other", now)), body, signature.ErrInvalid)
	rt.check(t, "persona", post("Persona-Signature", set(secret, now)), changeByte(body), signature.ErrInvalid)
	rt.check(t, "persona", post("Persona-Signature", set(secret, now.Add(-10*time.Minute))), body, signature.ErrTimestamp)
	route{secrets: []string{secret, old}}.check(t, "persona", post("Persona-Signature", set(old, now)), body, nil)
	if k := keyOf(t, "persona", post(), body); k != "json:data.id=evt_ZUShTWJjiHC5KsLMs7crM2jv" {
		t.Fatalf("key %q", k)
	}
}
