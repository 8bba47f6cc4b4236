package providers

import (
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Revolut's "Verify the payload signature" (Merchant and Business APIs):
// `payload_to_sign = v1.{Revolut-Request-Timestamp}.{raw body}`, HMAC-SHA256
// hex with the signing secret, `Revolut-Signature: v1=<hex>` and, while
// secrets rotate, several comma-separated; 5 minutes' tolerance on the
// timestamp in milliseconds. Revolut publishes no secret and signature to
// replay.
func TestRevolut(t *testing.T) {
	const secret = "wsk_r59a4HfWVAKycbCaNO1RvgCJec02gRd8"
	rt := route{secrets: []string{secret}}
	body := []byte(`{"event":"ORDER_COMPLETED","order_id":"9fc01989-3f61-4484-a5d9-ffe768531be9","merchant_order_ext_ref":"Test #3928"}`)
	sign := func(key string, at time.Time) (ts, sig string) {
		ts = strconv.FormatInt(at.UnixMilli(), 10)
		return ts, "v1=" + sigtest.HMACHex(key, "v1.", ts, ".", string(body))
	}
	now := time.Now()
	ts, sig := sign(secret, now)
	rt.check(t, "revolut", post("Revolut-Signature", sig, "Revolut-Request-Timestamp", ts), body, nil)
	_, oldSig := sign("wsk_old", now)
	rt.check(t, "revolut", post("Revolut-Signature", oldSig+","+sig, "Revolut-Request-Timestamp", ts), body, nil)
	rt.check(t, "revolut", post("Revolut-Signature", oldSig, "Revolut-Request-Timestamp", ts), body, signature.ErrInvalid)
	rt.check(t, "revolut", post("Revolut-Signature", sig, "Revolut-Request-Timestamp", ts), changeByte(body), signature.ErrInvalid)
	staleTS, staleSig := sign(secret, now.Add(-6*time.Minute))
	rt.check(t, "revolut", post("Revolut-Signature", staleSig, "Revolut-Request-Timestamp", staleTS), body, signature.ErrTimestamp)
	rt.check(t, "revolut", post("Revolut-Signature", sig), body, signature.ErrMissing)
}
