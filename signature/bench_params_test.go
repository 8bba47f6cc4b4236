package signature_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// BenchmarkParams measures one valid `t=…,v1=…` delivery of 2 KB three
// ways: Stripe's own scheme (NewStripe), the same scheme as a template over
// the header's parameters (how the calendly preset is declared), and
// Hook0's scheme with v1 over three headers (the coinbase preset).
// BenchmarkVerifyBaseline, one bare HMAC-SHA256 of the body, is the floor.
func BenchmarkParams(b *testing.B) {
	body := sigtest.BenchBody("stripe")
	now := time.Now()
	run := func(b *testing.B, v signature.Verifier, r *http.Request) { benchVerify(b, v, r, body) }
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_bench", Timestamp: now})
	stripeReq := sigtest.NewDelivery("/", body, time.Time{}).Req
	stripeReq.Header.Set("Stripe-Signature", signed.Header)

	b.Run("stripe-scheme", func(b *testing.B) {
		run(b, signature.NewStripe([]string{"whsec_bench"}, 0), stripeReq)
	})
	b.Run("template-params", func(b *testing.B) {
		v, err := signature.NewTemplate(stripeTemplate("whsec_bench"))
		if err != nil {
			b.Fatal(err)
		}
		run(b, v, stripeReq)
	})
	b.Run("hook0-v1-3-headers", func(b *testing.B) {
		v, err := signature.NewHook0(signature.Hook0Config{Secrets: []string{"whsec_bench"}, Require: []string{"x-event-id"}})
		if err != nil {
			b.Fatal(err)
		}
		s, err := signature.NewHook0Signer("", "whsec_bench", []string{"Content-Type", "X-Event-Id", "X-Event-Type"})
		if err != nil {
			b.Fatal(err)
		}
		r := sigtest.NewDelivery("/", body, time.Time{}).Req
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Event-Id", "1a01cb48-5142-4d9b-8f90-d20cca61f0ee")
		r.Header.Set("X-Event-Type", "payments.transfers.completed")
		if _, err := s.Sign(r, body, now); err != nil {
			b.Fatal(err)
		}
		run(b, v, r)
	})
}

// benchVerify measures v on one valid delivery.
func benchVerify(b *testing.B, v signature.Verifier, r *http.Request, body []byte) {
	if err := v.Verify(r, body); err != nil {
		b.Fatalf("benchmark delivery refused: %v", err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := v.Verify(r, body); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}
