package webhookidempotency

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/google/go-github/v72/github"
	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	twilio "github.com/twilio/twilio-go/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The signing helpers below follow each provider's documented formula and
// are written without the production code, so that a mistake in one is not
// mirrored in the other. Where a provider publishes a Go library, the
// library signs (Stripe, Standard Webhooks) or checks the helper's output
// (Slack, GitHub, Paddle, Twilio).

func testHMAC(newHash func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hmacHex(key string, parts ...string) string {
	return hex.EncodeToString(testHMAC(sha256.New, []byte(key), parts...))
}

func hmacBase64(key string, parts ...string) string {
	return base64.StdEncoding.EncodeToString(testHMAC(sha256.New, []byte(key), parts...))
}

// a delivery to sign: body, time and the request it goes in
type delivery struct {
	body []byte
	at   time.Time
	req  *http.Request
}

func newDelivery(target string, body []byte, at time.Time) *delivery {
	return &delivery{body: body, at: at, req: httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))}
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// presetCase describes how one preset signs.
type presetCase struct {
	scheme string
	// secrets: a valid one, another valid one (rotation), a wrong one
	secrets [3]string
	target  string
	body    string
	// sign signs d with secret in place
	sign func(t testing.TB, secret string, d *delivery)
	// headers are the signature headers, each of which is required
	headers []string
	// timestamped: the scheme signs a timestamp checked against tolerance
	timestamped bool
	// tamper changes the delivery in a way the signature must catch, when
	// changing a body byte is not it
	tamper func(d *delivery) []byte
	cfg    VerifyConfig
}

const stdSecretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var stdSecretB = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a second standard webhooks secret"))
var stdSecretC = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a wrong standard webhooks secret!"))

func presetCases() []presetCase {
	return []presetCase{
		{
			scheme:  "stripe",
			secrets: [3]string{"whsec_test_secret_one", "whsec_test_secret_two", "whsec_wrong"},
			body:    `{"id":"evt_1NG8Du2eZvKYlo2C","object":"event","type":"charge.succeeded"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: d.body, Secret: secret, Timestamp: d.at})
				d.req.Header.Set("Stripe-Signature", p.Header)
			},
			headers:     []string{"Stripe-Signature"},
			timestamped: true,
		},
		{
			scheme:  "github",
			secrets: [3]string{"gh-secret-1", "gh-secret-2", "gh-wrong"},
			body:    `{"action":"opened","number":1}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				sig := "sha256=" + hmacHex(secret, string(d.body))
				if err := github.ValidateSignature(sig, d.body, []byte(secret)); err != nil {
					t.Fatalf("go-github rejects the helper's signature: %v", err)
				}
				d.req.Header.Set("X-Hub-Signature-256", sig)
			},
			headers: []string{"X-Hub-Signature-256"},
		},
		{
			scheme:  "shopify",
			secrets: [3]string{"shpss_one", "shpss_two", "shpss_wrong"},
			body:    `{"id":820982911946154508,"email":"jon@example.com"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("X-Shopify-Hmac-Sha256", hmacBase64(secret, string(d.body)))
			},
			headers: []string{"X-Shopify-Hmac-Sha256"},
		},
		{
			scheme:  "slack",
			secrets: [3]string{"8f742231b10e8888abcd99yyyzzz85a5", "e6b19c573432dcc6b075501d51b51bb8", "0000000000000000000000000000dead"},
			body:    `{"type":"event_callback","event_id":"Ev0PV52K21"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				ts := unix(d.at)
				d.req.Header.Set("X-Slack-Request-Timestamp", ts)
				d.req.Header.Set("X-Slack-Signature", "v0="+hmacHex(secret, "v0:", ts, ":", string(d.body)))
				if time.Since(d.at).Abs() < time.Minute {
					sv, err := slack.NewSecretsVerifier(d.req.Header, secret)
					if err != nil {
						t.Fatalf("slack-go rejects the helper's headers: %v", err)
					}
					sv.Write(d.body)
					if err := sv.Ensure(); err != nil {
						t.Fatalf("slack-go rejects the helper's signature: %v", err)
					}
				}
			},
			headers:     []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
			timestamped: true,
		},
		standardCase("standard", "webhook-"),
		standardCase("svix", "svix-"),
		{
			scheme:  "whatsapp",
			secrets: [3]string{"meta-app-secret-1", "meta-app-secret-2", "meta-wrong"},
			body:    `{"object":"whatsapp_business_account","entry":[{"id":"1"}]}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex(secret, string(d.body)))
			},
			headers: []string{"X-Hub-Signature-256"},
		},
		{
			scheme:  "ifood",
			secrets: [3]string{"ifood-client-secret-1", "ifood-client-secret-2", "ifood-wrong"},
			body:    `{"id":"cd40582b-0ef2-4d52-bc7c-507e9f7ea5c0","code":"PLC"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("X-IFood-Signature", hmacHex(secret, string(d.body)))
			},
			headers: []string{"X-IFood-Signature"},
		},
		{
			scheme:  "mercadopago",
			secrets: [3]string{"mp-secret-1", "mp-secret-2", "mp-wrong"},
			target:  "/hooks/mp?data.id=ABC123&type=payment",
			body:    `{"action":"payment.updated","data":{"id":"abc123"},"type":"payment"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				ts := unix(d.at)
				reqID := "bb56a2f1-6aae-46ac-982e-9dcd3581d08e"
				// data.id is lower-cased in the manifest
				manifest := "id:abc123;request-id:" + reqID + ";ts:" + ts + ";"
				d.req.Header.Set("x-request-id", reqID)
				d.req.Header.Set("x-signature", "ts="+ts+",v1="+hmacHex(secret, manifest))
			},
			headers:     []string{"x-signature"},
			timestamped: true,
			// the manifest does not cover the body; its data.id must match
			tamper: func(d *delivery) []byte {
				return bytes.Replace(d.body, []byte("abc123"), []byte("abc124"), 1)
			},
		},
		{
			scheme:  "pagbank",
			secrets: [3]string{"pagbank-token-1", "pagbank-token-2", "pagbank-wrong"},
			body:    `{"id":"ORDE_1","charges":[{"status":"PAID"}]}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				sum := sha256.Sum256([]byte(secret + "-" + string(d.body)))
				d.req.Header.Set("x-authenticity-token", hex.EncodeToString(sum[:]))
			},
			headers: []string{"x-authenticity-token"},
		},
		{
			scheme:  "paddle",
			secrets: [3]string{"pdl_ntfset_01_one", "pdl_ntfset_01_two", "pdl_ntfset_01_wrong"},
			body:    `{"event_id":"evt_01","notification_id":"ntf_01"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				ts := unix(d.at)
				d.req.Header.Set("Paddle-Signature", "ts="+ts+";h1="+hmacHex(secret, ts, ":", string(d.body)))
				// the Paddle SDK checks the helper
				check := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(d.body))
				check.Header = d.req.Header.Clone()
				if ok, err := paddle.NewWebhookVerifier(secret).Verify(check); !ok || err != nil {
					t.Fatalf("paddle SDK rejects the helper's signature: %v %v", ok, err)
				}
			},
			headers:     []string{"Paddle-Signature"},
			timestamped: true,
		},
		{
			scheme:  "twilio",
			secrets: [3]string{"twilio-auth-token-1", "twilio-auth-token-2", "twilio-wrong"},
			target:  "/sms?tenant=7",
			body:    "To=%2B18005551212&From=%2B14158675309&Body=hello&MessageSid=SM1",
			cfg:     VerifyConfig{URL: "https://hooks.example.com/sms"},
			sign: func(t testing.TB, secret string, d *delivery) {
				u := "https://hooks.example.com/sms?tenant=7"
				form, _ := url.ParseQuery(string(d.body))
				names := make([]string, 0, len(form))
				for n := range form {
					names = append(names, n)
				}
				sort.Strings(names)
				msg := u
				for _, n := range names {
					msg += n + form.Get(n)
				}
				sig := base64.StdEncoding.EncodeToString(testHMAC(sha1.New, []byte(secret), msg))
				v := twilio.NewRequestValidator(secret)
				if !v.ValidateBody(u, d.body, sig) {
					t.Fatal("twilio-go rejects the helper's signature")
				}
				d.req.Header.Set("X-Twilio-Signature", sig)
			},
			headers: []string{"X-Twilio-Signature"},
			tamper: func(d *delivery) []byte {
				return bytes.Replace(d.body, []byte("hello"), []byte("hellp"), 1)
			},
		},
		{
			scheme:  "square",
			secrets: [3]string{"square-sig-key-1", "square-sig-key-2", "square-wrong"},
			target:  "/square",
			body:    `{"merchant_id":"M1","event_id":"6a8f5f28-54a1-4eb0-a98a-3111513fd4fc"}`,
			cfg:     VerifyConfig{URL: "https://shop.example.com/square"},
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("x-square-hmacsha256-signature", hmacBase64(secret, "https://shop.example.com/square", string(d.body)))
			},
			headers: []string{"x-square-hmacsha256-signature"},
		},
		{
			scheme:  "gitlab",
			secrets: [3]string{"gitlab-token-1", "gitlab-token-2", "gitlab-wrong"},
			body:    `{"object_kind":"push"}`,
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("X-Gitlab-Token", secret)
			},
			headers: []string{"X-Gitlab-Token"},
			// a token does not sign the body: tampering is not detectable
			tamper: func(d *delivery) []byte { return nil },
		},
		{
			scheme:  "evolution",
			secrets: [3]string{"evo-token-1", "evo-token-2", "evo-wrong"},
			body:    `{"event":"messages.upsert"}`,
			cfg:     VerifyConfig{Header: "apikey"},
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("apikey", secret)
			},
			headers: []string{"apikey"},
			tamper:  func(d *delivery) []byte { return nil },
		},
		{
			scheme:  "stone",
			secrets: [3]string{"stone-gw-1", "stone-gw-2", "stone-wrong"},
			body:    `{"event":"charge.paid"}`,
			cfg:     VerifyConfig{Header: "X-Gateway-Token"},
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("X-Gateway-Token", secret)
			},
			headers: []string{"X-Gateway-Token"},
			tamper:  func(d *delivery) []byte { return nil },
		},
		{
			scheme:  "hmac",
			secrets: [3]string{"generic-1", "generic-2", "generic-wrong"},
			body:    `{"id":"x"}`,
			cfg:     VerifyConfig{Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512="},
			sign: func(t testing.TB, secret string, d *delivery) {
				m := hmac.New(sha512.New, []byte(secret))
				m.Write(d.body)
				d.req.Header.Set("X-Signature", "sha512="+base64.StdEncoding.EncodeToString(m.Sum(nil)))
			},
			headers: []string{"X-Signature"},
		},
		{
			scheme:  "token",
			secrets: [3]string{"tok-1", "tok-2", "tok-wrong"},
			body:    `{"id":"x"}`,
			cfg:     VerifyConfig{Header: "Authorization", Prefix: "Bearer "},
			sign: func(t testing.TB, secret string, d *delivery) {
				d.req.Header.Set("Authorization", "Bearer "+secret)
			},
			headers: []string{"Authorization"},
			tamper:  func(d *delivery) []byte { return nil },
		},
	}
}

func standardCase(scheme, prefix string) presetCase {
	return presetCase{
		scheme:  scheme,
		secrets: [3]string{stdSecretA, stdSecretB, stdSecretC},
		body:    `{"type":"invoice.paid","data":{"id":"in_1"}}`,
		sign: func(t testing.TB, secret string, d *delivery) {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := wh.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", d.at, d.body)
			if err != nil {
				t.Fatal(err)
			}
			d.req.Header.Set(prefix+"id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
			d.req.Header.Set(prefix+"timestamp", unix(d.at))
			// an unknown version and an asymmetric signature come first
			d.req.Header.Set(prefix+"signature", "v2,bm9wZQ== v1a,bm9wZQ== "+sig)
		},
		headers:     []string{prefix + "id", prefix + "timestamp", prefix + "signature"},
		timestamped: true,
	}
}

// build returns the verifier of c with the given secrets.
func (c presetCase) build(t *testing.T, tolerance time.Duration, secrets ...string) Verifier {
	t.Helper()
	cfg := c.cfg
	cfg.Scheme = c.scheme
	cfg.Secrets = secrets
	cfg.Tolerance = caddy.Duration(tolerance)
	v, err := newVerifier(cfg)
	if err != nil {
		t.Fatalf("newVerifier(%s): %v", c.scheme, err)
	}
	return v
}

func (c presetCase) delivery(t *testing.T, secret string, at time.Time) *delivery {
	target := c.target
	if target == "" {
		target = "/hook"
	}
	d := newDelivery(target, []byte(c.body), at)
	c.sign(t, secret, d)
	return d
}

func wantReason(t *testing.T, err error, want *VerificationError) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	var ve *VerificationError
	if !errors.As(err, &ve) || ve.Reason != want.Reason {
		t.Fatalf("want %q, got %v", want.Reason, err)
	}
}

func TestVerifyPresets(t *testing.T) {
	for _, c := range presetCases() {
		t.Run(c.scheme, func(t *testing.T) {
			a, b, wrong := c.secrets[0], c.secrets[1], c.secrets[2]
			v := c.build(t, defaultTolerance, a)

			t.Run("valid", func(t *testing.T) {
				d := c.delivery(t, a, time.Now())
				wantReason(t, v.Verify(d.req, d.body), nil)
			})
			t.Run("tampered body", func(t *testing.T) {
				d := c.delivery(t, a, time.Now())
				tampered := bytes.Replace(d.body, []byte("{"), []byte("{ "), 1)
				if c.tamper != nil {
					tampered = c.tamper(d)
				}
				if tampered == nil {
					t.Skipf("%s does not sign the body", c.scheme)
				}
				wantReason(t, v.Verify(d.req, tampered), errInvalidSignature)
			})
			t.Run("missing header", func(t *testing.T) {
				for _, h := range c.headers {
					d := c.delivery(t, a, time.Now())
					d.req.Header.Del(h)
					if err := v.Verify(d.req, d.body); err == nil {
						t.Fatalf("without %s: accepted", h)
					} else {
						wantReason(t, err, errMissingSignature)
					}
				}
			})
			t.Run("wrong secret", func(t *testing.T) {
				d := c.delivery(t, wrong, time.Now())
				wantReason(t, v.Verify(d.req, d.body), errInvalidSignature)
			})
			t.Run("garbage signature", func(t *testing.T) {
				d := c.delivery(t, a, time.Now())
				for _, h := range c.headers {
					d.req.Header.Set(h, "\x00,;=v1=t=ts=h1=")
				}
				if err := v.Verify(d.req, d.body); err == nil {
					t.Fatal("accepted")
				}
			})
			t.Run("rotation", func(t *testing.T) {
				both := c.build(t, defaultTolerance, a, b)
				for _, s := range []string{a, b} {
					d := c.delivery(t, s, time.Now())
					wantReason(t, both.Verify(d.req, d.body), nil)
				}
				d := c.delivery(t, wrong, time.Now())
				wantReason(t, both.Verify(d.req, d.body), errInvalidSignature)
				// the new secret alone rejects deliveries signed with the old
				d = c.delivery(t, a, time.Now())
				wantReason(t, c.build(t, defaultTolerance, b).Verify(d.req, d.body), errInvalidSignature)
			})
			if !c.timestamped {
				return
			}
			t.Run("old timestamp", func(t *testing.T) {
				d := c.delivery(t, a, time.Now().Add(-6*time.Minute))
				wantReason(t, v.Verify(d.req, d.body), errStaleTimestamp)
			})
			t.Run("future timestamp", func(t *testing.T) {
				d := c.delivery(t, a, time.Now().Add(6*time.Minute))
				wantReason(t, v.Verify(d.req, d.body), errStaleTimestamp)
			})
			t.Run("within tolerance", func(t *testing.T) {
				d := c.delivery(t, a, time.Now().Add(-4*time.Minute))
				wantReason(t, v.Verify(d.req, d.body), nil)
			})
			t.Run("configured tolerance", func(t *testing.T) {
				d := c.delivery(t, a, time.Now().Add(-30*time.Minute))
				wantReason(t, c.build(t, time.Hour, a).Verify(d.req, d.body), nil)
				wantReason(t, c.build(t, time.Minute, a).Verify(d.req, d.body), errStaleTimestamp)
			})
		})
	}
}

// TestVerifyPresetsCoverEveryProvider keeps the table above complete.
func TestVerifyPresetsCoverEveryProvider(t *testing.T) {
	tested := map[string]bool{}
	for _, c := range presetCases() {
		tested[c.scheme] = true
	}
	for name := range providers {
		if !tested[name] {
			t.Errorf("provider %s has no test case", name)
		}
	}
}

// withClock sets the clock for one test.
func withClock(t *testing.T, at time.Time) {
	t.Helper()
	old := now
	now = func() time.Time { return at }
	t.Cleanup(func() { now = old })
}

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
		cfg     VerifyConfig
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
			target: "/myapp.php?foo=1&bar=2", cfg: VerifyConfig{URL: "https://mycompany.com/myapp.php"},
			body:    "property=value&boolean=true",
			headers: []string{"X-Twilio-Signature", "NBdBDr/T/lgjI+tlgpXjKZQZs/k="},
		},
		{
			// twilio-go request_validator_test.go, JSON body
			name: "twilio-go json", scheme: "twilio", secret: "12345",
			target: "/myapp.php?foo=1&bar=2&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620",
			cfg:    VerifyConfig{URL: "https://mycompany.com/myapp.php"},
			body:   `{"property": "value", "boolean": true}`, headers: []string{"X-Twilio-Signature", "a9nBmqA0ju/hNViExpshrM61xv4="},
		},
		{
			// twilio-go: signed without the port, received with one
			name: "twilio-go port", scheme: "twilio", secret: "12345",
			target: "/myapp.php?foo=1&bar=2", cfg: VerifyConfig{URL: "https://mycompany.com:443/myapp.php"},
			body:    "property=value&boolean=true",
			headers: []string{"X-Twilio-Signature", "NBdBDr/T/lgjI+tlgpXjKZQZs/k="},
		},
	}
	for _, vec := range vectors {
		t.Run(vec.name, func(t *testing.T) {
			if vec.at != 0 {
				withClock(t, time.Unix(vec.at, 0).Add(time.Minute))
			}
			cfg := vec.cfg
			cfg.Scheme, cfg.Secrets = vec.scheme, []string{vec.secret}
			v, err := newVerifier(cfg)
			if err != nil {
				t.Fatal(err)
			}
			target := vec.target
			if target == "" {
				target = "/"
			}
			d := newDelivery(target, []byte(vec.body), time.Time{})
			for i := 0; i < len(vec.headers); i += 2 {
				d.req.Header.Set(vec.headers[i], vec.headers[i+1])
			}
			wantReason(t, v.Verify(d.req, d.body), nil)
			// one byte more and it fails
			wantReason(t, v.Verify(d.req, append(d.body, ' ')), errInvalidSignature)
		})
	}
}

func TestVerifyStripeSecretIsRawBytes(t *testing.T) {
	// a Standard Webhooks verifier would base64-decode whsec_…; Stripe must not
	secret := stdSecretA
	d := presetCases()[0].delivery(t, secret, time.Now())
	v, err := newVerifier(VerifyConfig{Scheme: "stripe", Secrets: []string{secret}, Tolerance: caddy.Duration(defaultTolerance)})
	if err != nil {
		t.Fatal(err)
	}
	wantReason(t, v.Verify(d.req, d.body), nil)
	// and the same header signed with the decoded key fails
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	ts := unix(time.Now())
	d.req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hmacHex(string(key), ts, ".", string(d.body)))
	wantReason(t, v.Verify(d.req, d.body), errInvalidSignature)
}

func TestVerifyStripeSeveralSignatures(t *testing.T) {
	v, _ := newVerifier(VerifyConfig{Scheme: "stripe", Secrets: []string{"whsec_new"}, Tolerance: caddy.Duration(defaultTolerance)})
	body := []byte(`{"id":"evt_1"}`)
	ts := unix(time.Now())
	good := hmacHex("whsec_new", ts, ".", string(body))
	bad := hmacHex("whsec_old", ts, ".", string(body))
	for _, h := range []string{
		"t=" + ts + ",v1=" + bad + ",v1=" + good,
		"t=" + ts + ",v0=" + bad + ",v1=" + good,
		"v1=" + good + ", t=" + ts,
	} {
		d := newDelivery("/", body, time.Time{})
		d.req.Header.Set("Stripe-Signature", h)
		wantReason(t, v.Verify(d.req, body), nil)
	}
	// past the cap, a valid signature is not looked at
	d := newDelivery("/", body, time.Time{})
	d.req.Header.Set("Stripe-Signature", "t="+ts+strings.Repeat(",v1="+bad, maxHeaderItems)+",v1="+good)
	wantReason(t, v.Verify(d.req, body), errInvalidSignature)
	// a v0 (test-mode) signature alone is not accepted
	d.req.Header.Set("Stripe-Signature", "t="+ts+",v0="+good)
	wantReason(t, v.Verify(d.req, body), errInvalidSignature)
}

func TestVerifyPaddleSeveralSignatures(t *testing.T) {
	v, _ := newVerifier(VerifyConfig{Scheme: "paddle", Secrets: []string{"pdl_new"}, Tolerance: caddy.Duration(defaultTolerance)})
	body := []byte(`{"notification_id":"ntf_1"}`)
	ts := unix(time.Now())
	d := newDelivery("/", body, time.Time{})
	d.req.Header.Set("Paddle-Signature", "ts="+ts+";h1="+hmacHex("pdl_old", ts, ":", string(body))+";h1="+hmacHex("pdl_new", ts, ":", string(body)))
	wantReason(t, v.Verify(d.req, body), nil)
}

func TestVerifyStandardWebhooksSecrets(t *testing.T) {
	for _, bad := range []string{"whsec_not base64!", "whsec_"} {
		if _, err := newVerifier(VerifyConfig{Scheme: "standard", Secrets: []string{bad}}); err == nil {
			t.Errorf("secret %q accepted", bad)
		} else if strings.Contains(err.Error(), "not base64!") {
			t.Errorf("error reveals the secret: %v", err)
		}
	}
	// the prefix is optional, as in the reference library
	v, err := newVerifier(VerifyConfig{Scheme: "standard", Secrets: []string{strings.TrimPrefix(stdSecretA, "whsec_")}, Tolerance: caddy.Duration(defaultTolerance)})
	if err != nil {
		t.Fatal(err)
	}
	d := standardCase("standard", "webhook-").delivery(t, stdSecretA, time.Now())
	wantReason(t, v.Verify(d.req, d.body), nil)
}

func TestVerifyGitLabSigningToken(t *testing.T) {
	// GitLab's signing tokens are Standard Webhooks secrets
	v, err := newVerifier(VerifyConfig{Scheme: "gitlab", Secrets: []string{"plain-token", stdSecretB}, Tolerance: caddy.Duration(defaultTolerance)})
	if err != nil {
		t.Fatal(err)
	}
	std := standardCase("gitlab", "webhook-")
	d := std.delivery(t, stdSecretB, time.Now())
	wantReason(t, v.Verify(d.req, d.body), nil)
	wantReason(t, v.Verify(d.req, append(d.body, ' ')), errInvalidSignature)
	d = std.delivery(t, stdSecretB, time.Now().Add(-time.Hour))
	wantReason(t, v.Verify(d.req, d.body), errStaleTimestamp)
	// the plain token still works
	d = newDelivery("/", []byte(`{}`), time.Time{})
	d.req.Header.Set("X-Gitlab-Token", "plain-token")
	wantReason(t, v.Verify(d.req, d.body), nil)
	// a whsec_ secret is not accepted as a plain token
	d.req.Header.Set("X-Gitlab-Token", stdSecretB)
	wantReason(t, v.Verify(d.req, d.body), errInvalidSignature)

	// with signing tokens only, the plain header proves nothing
	only, _ := newVerifier(VerifyConfig{Scheme: "gitlab", Secrets: []string{stdSecretB}, Tolerance: caddy.Duration(defaultTolerance)})
	wantReason(t, only.Verify(d.req, d.body), errMissingSignature)
}

func TestVerifyMercadoPagoManifest(t *testing.T) {
	withClock(t, time.Unix(1704908010, 0))
	v, _ := newVerifier(VerifyConfig{Scheme: "mercadopago", Secrets: []string{"mp"}, Tolerance: caddy.Duration(defaultTolerance)})
	sign := func(manifest string) string { return hmacHex("mp", manifest) }
	t.Run("absent parts are left out", func(t *testing.T) {
		d := newDelivery("/mp", []byte(`{"type":"test"}`), time.Time{})
		d.req.Header.Set("x-signature", "ts=1704908010,v1="+sign("ts:1704908010;"))
		wantReason(t, v.Verify(d.req, d.body), nil)
	})
	t.Run("milliseconds and spaces", func(t *testing.T) {
		d := newDelivery("/mp?data.id=123&type=payment", []byte(`{"data":{"id":123}}`), time.Time{})
		d.req.Header.Set("x-request-id", "req-1")
		d.req.Header.Set("x-signature", "ts=1704908010000, v1="+sign("id:123;request-id:req-1;ts:1704908010000;"))
		wantReason(t, v.Verify(d.req, d.body), nil)
	})
	t.Run("a changed request id fails", func(t *testing.T) {
		d := newDelivery("/mp?data.id=123", []byte(`{}`), time.Time{})
		d.req.Header.Set("x-request-id", "req-2")
		d.req.Header.Set("x-signature", "ts=1704908010,v1="+sign("id:123;request-id:req-1;ts:1704908010;"))
		wantReason(t, v.Verify(d.req, d.body), errInvalidSignature)
	})
	t.Run("a body about another resource fails", func(t *testing.T) {
		d := newDelivery("/mp?data.id=123", []byte(`{"data":{"id":"999"}}`), time.Time{})
		d.req.Header.Set("x-signature", "ts=1704908010,v1="+sign("id:123;ts:1704908010;"))
		wantReason(t, v.Verify(d.req, d.body), errInvalidSignature)
	})
}

func TestVerifyPublicURL(t *testing.T) {
	body := []byte(`{"event_id":"e1"}`)
	signFor := func(u string) string { return hmacBase64("sq", u, string(body)) }
	v, _ := newVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}})

	request := func(trusted bool) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "http://internal:8080/square?x=1", bytes.NewReader(body))
		r.Header.Set("X-Forwarded-Proto", "https")
		r.Header.Set("X-Forwarded-Host", "shop.example.com, proxy.local")
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), nil, nil)
		caddyhttp.SetVar(r.Context(), caddyhttp.TrustedProxyVarKey, trusted)
		return r
	}

	t.Run("forwarded headers from a trusted proxy", func(t *testing.T) {
		r := request(true)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://shop.example.com/square?x=1"))
		wantReason(t, v.Verify(r, body), nil)
	})
	t.Run("forwarded headers from anyone else are ignored", func(t *testing.T) {
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://shop.example.com/square?x=1"))
		wantReason(t, v.Verify(r, body), errInvalidSignature)
		r.Header.Set("x-square-hmacsha256-signature", signFor("http://internal:8080/square?x=1"))
		wantReason(t, v.Verify(r, body), nil)
	})
	t.Run("configured url with a query is used as is", func(t *testing.T) {
		cv, err := newVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}, URL: "https://a.example/square?tenant=1"})
		if err != nil {
			t.Fatal(err)
		}
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://a.example/square?tenant=1"))
		wantReason(t, cv.Verify(r, body), nil)
	})
	t.Run("url placeholders are resolved at provision", func(t *testing.T) {
		t.Setenv("WEBHOOK_TEST_PUBLIC_URL", "https://env.example")
		cv, err := newVerifier(VerifyConfig{Scheme: "square", Secrets: []string{"sq"}, URL: "{env.WEBHOOK_TEST_PUBLIC_URL}/square"})
		if err != nil {
			t.Fatal(err)
		}
		r := request(false)
		r.Header.Set("x-square-hmacsha256-signature", signFor("https://env.example/square?x=1"))
		wantReason(t, cv.Verify(r, body), nil)
	})
}

func TestVerifyConfigErrors(t *testing.T) {
	for _, cfg := range []VerifyConfig{
		{Scheme: "hmac", Secrets: []string{"s"}},                                // no header
		{Scheme: "hmac", Secrets: []string{"s"}, Header: "X", Algorithm: "md5"}, // bad algorithm
		{Scheme: "hmac", Secrets: []string{"s"}, Header: "X", Encoding: "b32"},
		{Scheme: "token", Secrets: []string{"s"}},
		{Scheme: "evolution", Secrets: []string{"s"}},
		{Scheme: "stone", Secrets: []string{"s"}},
		{Scheme: "stripe", Secrets: []string{"s"}, Header: "X-Other"},
		{Scheme: "github", Secrets: []string{"s"}, Algorithm: "sha1"},
		{Scheme: "twilio", Secrets: []string{"s"}, URL: "ftp://x"},
		{Scheme: "nope", Secrets: []string{"s"}},
	} {
		if _, err := newVerifier(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		} else if strings.Contains(err.Error(), `"s"`) {
			t.Errorf("%+v: error reveals the secret: %v", cfg, err)
		}
	}
	// stone without a secret verifies nothing, by design
	if v, err := newVerifier(VerifyConfig{Scheme: "stone"}); err != nil || v != nil {
		t.Errorf("stone without secret: %v, %v", v, err)
	}
}

func TestVerifyTokenDoesNotAcceptPrefixes(t *testing.T) {
	v, _ := newVerifier(VerifyConfig{Scheme: "token", Header: "X-Token", Secrets: []string{"correct-horse"}})
	for _, tok := range []string{"correct", "correct-horse-battery", "", "Correct-horse"} {
		d := newDelivery("/", nil, time.Time{})
		d.req.Header.Set("X-Token", tok)
		if err := v.Verify(d.req, nil); err == nil {
			t.Errorf("token %q accepted", tok)
		}
	}
}

func TestVerifyProvisionWarnsOnVolatileKey(t *testing.T) {
	cases := []struct {
		h    Handler
		warn bool
	}{
		{Handler{Source: "stripe", Key: []string{"header:stripe-signature", "body"}}, true},
		{Handler{Provider: "stripe", Key: []string{"header:Stripe-Signature"}}, true},
		{Handler{Provider: "svix", Key: []string{"header:svix-timestamp"}}, true},
		{Handler{Provider: "stripe", Key: []string{"json:id", "body"}}, false},
		{Handler{Provider: "github", Key: []string{"header:X-GitHub-Delivery", "body"}}, false},
	}
	for _, c := range cases {
		core, logs := observer.New(zapcore.WarnLevel)
		h := c.h
		h.logger = zap.New(core)
		h.warnVerifyConfig()
		if got := logs.Len() > 0; got != c.warn {
			t.Errorf("%v: warned %v, want %v", h.Key, got, c.warn)
			continue
		}
		if c.warn {
			e := logs.All()[0]
			if !strings.Contains(e.Message, "retries will not be deduplicated") {
				t.Errorf("message %q", e.Message)
			}
			if _, ok := e.ContextMap()["use_instead"]; !ok {
				t.Errorf("no use_instead field: %v", e.ContextMap())
			}
		}
	}
	// stone without a secret is flagged as unauthenticated
	core, logs := observer.New(zapcore.WarnLevel)
	h := Handler{Provider: "stone", logger: zap.New(core)}
	h.warnVerifyConfig()
	if logs.Len() != 1 || !strings.Contains(logs.All()[0].Message, "not authenticated") {
		t.Errorf("stone warning: %v", logs.All())
	}
}

func TestVerifyParsersDoNotAllocate(t *testing.T) {
	sig := strings.Repeat("ab", 32)
	stripeHeader := "t=1700000000,v1=" + sig + ",v1=" + sig
	paddleHeader := "ts=1700000000;h1=" + sig
	mpHeader := "ts=1700000000,v1=" + sig
	stdHeader := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	cases := map[string]func(){
		"stripe":      func() { parseStripeSignature(stripeHeader) },
		"paddle":      func() { parsePaddleSignature(paddleHeader) },
		"mercadopago": func() { parseMercadoPagoSignature(mpHeader) },
		"standard":    func() { parseStandardSignatures(stdHeader) },
	}
	// a megabyte of signatures costs no allocation either
	huge := strings.Repeat(",v1="+sig+";h1="+sig+" v1,"+base64.StdEncoding.EncodeToString([]byte(sig)), 1<<20/200)
	hugeStripe, hugePaddle, hugeMP := "t=1"+huge, "ts=1;"+huge, "ts=1"+huge
	cases["stripe huge"] = func() { parseStripeSignature(hugeStripe) }
	cases["paddle huge"] = func() { parsePaddleSignature(hugePaddle) }
	cases["mercadopago huge"] = func() { parseMercadoPagoSignature(hugeMP) }
	cases["standard huge"] = func() { parseStandardSignatures(huge) }
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per parse", name, n)
		}
	}
}

func TestVerifySignatureSetBounds(t *testing.T) {
	for n := 0; n <= 3*len(sigSet{}.sig[0]); n++ {
		for _, v := range []string{strings.Repeat("A", n), strings.Repeat("f", n), strings.Repeat("QUJD", n/4+1)[:n]} {
			var s sigSet
			s.add(encBase64, v)
			s.add(encHex, v)
			for i := 0; i < s.n; i++ {
				if s.size[i] == 0 || int(s.size[i]) > len(s.sig[i]) {
					t.Fatalf("length %d: size %d", n, s.size[i])
				}
			}
		}
	}
	// a 64-byte signature is the largest kept, in either encoding
	var s sigSet
	s.add(encHex, strings.Repeat("ab", 64))
	s.add(encBase64, base64.StdEncoding.EncodeToString(make([]byte, 64)))
	s.add(encBase64, base64.StdEncoding.EncodeToString(make([]byte, 65)))
	if s.n != 2 {
		t.Fatalf("kept %d signatures, want 2", s.n)
	}
}

// Verify runs concurrently on one verifier; pooled hash states must not
// leak between requests.
func TestVerifyConcurrent(t *testing.T) {
	for _, c := range presetCases() {
		v := c.build(t, defaultTolerance, c.secrets[0], c.secrets[1])
		good := c.delivery(t, c.secrets[1], time.Now())
		bad := c.delivery(t, c.secrets[2], time.Now())
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			go func() {
				for i := 0; i < 100; i++ {
					if err := v.Verify(good.req, good.body); err != nil {
						errs <- fmt.Errorf("%s: valid delivery rejected: %v", c.scheme, err)
						return
					}
					if v.Verify(bad.req, bad.body) == nil {
						errs <- fmt.Errorf("%s: forged delivery accepted", c.scheme)
						return
					}
				}
				errs <- nil
			}()
		}
		for g := 0; g < 8; g++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}
