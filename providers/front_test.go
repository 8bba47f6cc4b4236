package providers

import (
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Front's "Application webhooks" (verifying integrity): the timestamp
// header, a colon and the raw body, HMAC-SHA256 with the app's secret in
// base64, against x-front-signature. The validation sent when a webhook is
// saved is such a delivery, `{"type":"sync",…}` with a new
// x-front-challenge each time: verified, and keyed on its challenge so
// that every save reaches the application.
func TestFront(t *testing.T) {
	const secret = "front-app-secret"
	rt := route{secrets: []string{secret}}
	sign := func(key string, at time.Time, body []byte) []string {
		ts := strconv.FormatInt(at.UnixMilli(), 10)
		return []string{"X-Front-Request-Timestamp", ts, "X-Front-Signature", sigtest.HMACBase64(key, ts, ":", string(body))}
	}
	now := time.Now()
	event := []byte(`{"_links":{"self":"https://api2.frontapp.com/events/evt_55c8c149"},"id":"evt_55c8c149","type":"assign","emitted_at":1767225600.123,"source":{"_meta":{"type":"teammate"}}}`)
	rt.check(t, "front", post(sign(secret, now, event)...), event, nil)
	rt.check(t, "front", post(sign("other", now, event)...), event, signature.ErrInvalid)
	rt.check(t, "front", post(sign(secret, now, event)...), changeByte(event), signature.ErrInvalid)
	rt.check(t, "front", post(sign(secret, now.Add(-6*time.Minute), event)...), event, signature.ErrTimestamp)

	sync := []byte(`{"type":"sync","authorization":{"id":"cmp_abc"}}`)
	first := post(append(sign(secret, now, sync), "X-Front-Challenge", "c-1")...)
	second := post(append(sign(secret, now, sync), "X-Front-Challenge", "c-2")...)
	rt.check(t, "front", first, sync, nil)
	if keyOf(t, "front", first, sync) == keyOf(t, "front", second, sync) {
		t.Fatal("two saves of a webhook are keyed alike: the second would be answered with the first's answer")
	}
	if keyOf(t, "front", post(), event) != "" {
		t.Fatal("an event without a challenge is not keyed on its body")
	}
}
