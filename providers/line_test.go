package providers

import (
	"strings"
	"testing"

	"github.com/line/line-bot-sdk-go/v8/linebot/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// LINE's Go SDK (line-bot-sdk-go v8.14.0, webhook.ValidateSignature) is the
// oracle; a redelivery (`"isRedelivery":true`) is other bytes under the
// same event id, and the console's check is a signed request with no
// event.
func TestLINE(t *testing.T) {
	const secret = "8c570fa6dd201bb328f1c1eac23a96d8"
	first := []byte(`{"destination":"xxxxxxxxxx","events":[{"replyToken":"nHuyWiB7yP5Zw52FIkcQobQuGDXCTA","type":"message","mode":"active","timestamp":1767225600000,"source":{"type":"user","userId":"U4af4980629..."},"webhookEventId":"01FZ74A0TDDPYRVKNK77XKC3ZR","deliveryContext":{"isRedelivery":false},"message":{"id":"444573844083572737","type":"text","quoteToken":"q3Plxr4AgKd...","text":"Hello, world"}}]}`)
	redelivery := []byte(strings.Replace(string(first), `"isRedelivery":false`, `"isRedelivery":true`, 1))
	check := []byte(`{"destination":"xxxxxxxxxx","events":[]}`)
	rt := route{secrets: []string{secret}}
	for _, body := range [][]byte{first, redelivery, check} {
		for _, header := range []string{sigtest.HMACBase64(secret, string(body)), sigtest.HMACBase64("another", string(body)), sigtest.HMACHex(secret, string(body))} {
			want := signature.ErrInvalid
			if webhook.ValidateSignature(secret, header, body) {
				want = nil
			}
			rt.check(t, "line", post("X-Line-Signature", header), body, want)
		}
		rt.check(t, "line", post("X-Line-Signature", sigtest.HMACBase64(secret, string(body))), changeByte(body), signature.ErrInvalid)
	}
	k1, k2 := keyOf(t, "line", post(), first), keyOf(t, "line", post(), redelivery)
	if k1 != k2 || k1 != "json:events.0.webhookEventId=01FZ74A0TDDPYRVKNK77XKC3ZR" {
		t.Fatalf("a redelivery is keyed %q, the delivery %q", k2, k1)
	}
	if keyOf(t, "line", post(), check) != "" {
		t.Fatal("the check with no event has an event's key")
	}
}
