package providers

import (
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Customer.io's deliveries as customerio-node's verifyRequestSignature
// judges them (testdata/customerio.json). Its client checks no age, and
// Customer.io retries for 7 days: a delivery signed long ago still passes.
func TestCustomerIO(t *testing.T) {
	var vec struct {
		Secret  string
		Vectors []struct {
			Label, Body, Timestamp, Signature string
			Verdict                           bool
		}
	}
	nodeVectors(t, "customerio", &vec)
	rt := route{secrets: []string{vec.Secret}}
	for _, when := range []time.Time{vectorsAt, vectorsAt.Add(6 * 24 * time.Hour)} {
		at(t, when, func(t *testing.T) {
			for _, v := range vec.Vectors {
				want := signature.ErrInvalid
				if v.Verdict {
					want = nil
				}
				rt.check(t, "customerio", post("X-CIO-Signature", v.Signature, "X-CIO-Timestamp", v.Timestamp), []byte(v.Body), want)
			}
		})
	}
	good := vec.Vectors[0]
	rt.check(t, "customerio", post("X-CIO-Signature", good.Signature), []byte(good.Body), signature.ErrInvalid)
}
