package providers

import (
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// WorkOS's deliveries as @workos-inc/node signs and judges them
// (testdata/workos.json, at 2026-01-01T00:00:00Z), and the Go SDK's form
// (workos-go v10.1.1, ComputeWebhookSignature: HMAC-SHA256 hex of
// `{t}.{body}`, t in milliseconds; 180 s either way), which is not on the
// module proxy.
func TestWorkOS(t *testing.T) {
	vec := checkHeaderVectors(t, "workos", "WorkOS-Signature")
	rt := route{secrets: []string{vec.Secret}}
	at(t, vectorsAt, func(t *testing.T) {
		body := []byte(vec.Vectors[0].Body)
		future := strconv.FormatInt(time.Now().Add(4*time.Minute).UnixMilli(), 10)
		rt.check(t, "workos", post("WorkOS-Signature", "t="+future+", v1="+sigtest.HMACHex(vec.Secret, future, ".", string(body))), body, signature.ErrTimestamp)
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		rt.check(t, "workos", post("WorkOS-Signature", "t="+now+", v1="+sigtest.HMACHex(vec.Secret, now, ".", string(body))), changeByte(body), signature.ErrInvalid)
		rt.check(t, "workos", post("WorkOS-Signature", "v1="+sigtest.HMACHex(vec.Secret, now, ".", string(body))), body, signature.ErrInvalid)
	})
}
