package signature_test

import (
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Test vectors published by the providers or in their official libraries'
// test suites.
func TestVerifyPublishedVectors(t *testing.T) {
	type vector struct {
		name    string
		scheme  string
		secret  string
		at      int64
		target  string
		body    string
		headers []string
		url     string
	}
	vectors := []vector{
		{
			// GitHub docs, "Validating webhook deliveries"
			name: "github docs", scheme: "github", secret: "It's a Secret to Everybody",
			body:    "Hello, World!",
			headers: []string{"X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"},
		},
		{
			// slack-go security_test.go
			name: "slack-go", scheme: "slack", secret: "e6b19c573432dcc6b075501d51b51bb8", at: 1531431954,
			body: `{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention","user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec","ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback","event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}`,
			headers: []string{
				"X-Slack-Signature", "v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c",
				"X-Slack-Request-Timestamp", "1531431954",
			},
		},
		{
			// Standard Webhooks reference library, TestWebhookSign
			name: "standard webhooks", scheme: "standard", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", at: 1614265330,
			body: `{"test": 2432232314}`,
			headers: []string{
				"webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek",
				"webhook-timestamp", "1614265330",
				"webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
			},
		},
		{
			// Paddle Go SDK, example_webhook_verifier_test.go
			name: "paddle sdk", scheme: "paddle", secret: "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr", at: 1710929255,
			body:    `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`,
			headers: []string{"Paddle-Signature", "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"},
		},
		{
			// twilio-go request_validator_test.go, form body
			name: "twilio-go form", scheme: "twilio", secret: "12345",
			target: "/myapp.php?foo=1&bar=2", url: "https://mycompany.com/myapp.php",
			body:    "property=value&boolean=true",
			headers: []string{"X-Twilio-Signature", "NBdBDr/T/lgjI+tlgpXjKZQZs/k="},
		},
		{
			// twilio-go request_validator_test.go, JSON body
			name: "twilio-go json", scheme: "twilio", secret: "12345",
			target: "/myapp.php?foo=1&bar=2&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620",
			url:    "https://mycompany.com/myapp.php",
			body:   `{"property": "value", "boolean": true}`, headers: []string{"X-Twilio-Signature", "a9nBmqA0ju/hNViExpshrM61xv4="},
		},
		{
			// twilio-go: signed without the port, received with one
			name: "twilio-go port", scheme: "twilio", secret: "12345",
			target: "/myapp.php?foo=1&bar=2", url: "https://mycompany.com:443/myapp.php",
			body:    "property=value&boolean=true",
			headers: []string{"X-Twilio-Signature", "NBdBDr/T/lgjI+tlgpXjKZQZs/k="},
		},
	}
	for _, vec := range vectors {
		t.Run(vec.name, func(t *testing.T) {
			if vec.at != 0 {
				signature.SetClock(t, time.Unix(vec.at, 0).Add(time.Minute))
			}
			v, err := newScheme(sigtest.Case{Scheme: vec.scheme, URL: vec.url}, 0, []string{vec.secret})
			if err != nil {
				t.Fatal(err)
			}
			target := vec.target
			if target == "" {
				target = "/"
			}
			d := sigtest.NewDelivery(target, []byte(vec.body), time.Time{})
			for i := 0; i < len(vec.headers); i += 2 {
				d.Req.Header.Set(vec.headers[i], vec.headers[i+1])
			}
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
			// one byte more and it fails
			sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, ' ')), signature.ErrInvalid)
		})
	}
}
