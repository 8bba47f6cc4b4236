package providers

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// svixDelivery signs body as Svix does for Clerk and Resend, with the
// Standard Webhooks reference library (Clerk's and Resend's SDKs verify
// with its JavaScript twin, `standardwebhooks`), under svix- headers.
func svixDelivery(t *testing.T, secret, id string, at time.Time, body []byte) []string {
	t.Helper()
	return standardDelivery(t, secret, "svix-", id, at, body)
}

// checkSvixSender checks a sender that delivers through Svix: the library's
// signature passes under the sender's secret, not under another, nor on
// another body or after the tolerance; the key is the message id.
func checkSvixSender(t *testing.T, preset string, body []byte) {
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(preset+"-signing-secret-32-bytes-long!!"))
	rt := route{secrets: []string{secret}}
	now := time.Now()
	rt.check(t, preset, post(svixDelivery(t, secret, "msg_2hXqKEgQm7bLwd", now, body)...), body, nil)
	rt.check(t, preset, post(svixDelivery(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another")), "msg_2hXqKEgQm7bLwd", now, body)...), body, signature.ErrInvalid)
	rt.check(t, preset, post(svixDelivery(t, secret, "msg_2hXqKEgQm7bLwd", now, body)...), changeByte(body), signature.ErrInvalid)
	rt.check(t, preset, post(svixDelivery(t, secret, "msg_2hXqKEgQm7bLwd", now.Add(-6*time.Minute), body)...), body, signature.ErrTimestamp)
	// the message id is signed: another id is another message
	forged := post(svixDelivery(t, secret, "msg_2hXqKEgQm7bLwd", now, body)...)
	forged.Header.Set("svix-id", "msg_other")
	rt.check(t, preset, forged, body, signature.ErrInvalid)
	if k := keyOf(t, preset, post(svixDelivery(t, secret, "msg_2hXqKEgQm7bLwd", now, body)...), body); k != "header:svix-id=msg_2hXqKEgQm7bLwd" {
		t.Fatalf("key %q", k)
	}
	if p, _ := Lookup(preset); p.TTL < 28*time.Hour {
		t.Fatalf("%s does not cover Svix's retries", preset)
	}
}

func TestClerk(t *testing.T) {
	checkSvixSender(t, "clerk", []byte(`{"data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC","object":"user","email_addresses":[{"email_address":"example@example.org"}]},"event_attributes":{"http_request":{"client_ip":"0.0.0.0"}},"object":"event","timestamp":1654012591835,"type":"user.created"}`))
}
