package providers

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// gocardlessBody is testdata/webhook_request.json of GoCardless's Go SDK
// (gocardless/gocardless-pro-go at 553b873c, v6.4.5), 383 bytes with its
// final line feed, which webhooks_test.go sends with
// `Webhook-Signature: 243f3efa…` under the secret "testing". The module is
// not on the module proxy, so its vector is replayed here.
const gocardlessBody = `{"events":[{"id":"EVTESTNE86TNZS","created_at":"2017-03-20T17:57:02.292Z","resource_type":"payments","action":"failed","links":{"payment":"index_ID_123"},"details":{"origin":"bank","cause":"test_failure","scheme":"sepa_core","reason_code":"TEST","description":"GoCardless has marked this payment as failed in sandbox to enable testing of payment failure webhooks."},"metadata":{}}]}` + "\n"

func TestGoCardless(t *testing.T) {
	const sig = "243f3efa57743c24eec7c5e10edc475b547830d256d5b583745afe319dd90936"
	body := []byte(gocardlessBody)
	if len(body) != 383 {
		t.Fatalf("the SDK's body is 383 bytes, not %d", len(body))
	}
	rt := route{secrets: []string{"testing"}}
	rt.check(t, "gocardless", post("Webhook-Signature", sig), body, nil)
	rt.check(t, "gocardless", post("Webhook-Signature", sig), body[:382], signature.ErrInvalid)
	rt.check(t, "gocardless", post("Webhook-Signature", sig), changeByte(body), signature.ErrInvalid)
	route{secrets: []string{"testinG"}}.check(t, "gocardless", post("Webhook-Signature", sig), body, signature.ErrInvalid)
	rt.check(t, "gocardless", post("Webhook-Signature", sigtest.HMACHex("testing", string(body))), body, nil)
}
