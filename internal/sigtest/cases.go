package sigtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"testing"
	"time"

	paddle "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/go-jose/go-jose/v4"
	"github.com/google/go-github/v72/github"
	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"
	twilio "github.com/twilio/twilio-go/client"
)

// Case describes how one preset or scheme signs.
type Case struct {
	// Scheme is the preset or generic scheme name (`stripe`, `hmac`, …).
	Scheme string
	// Secrets: a valid one, another valid one (rotation), a wrong one.
	Secrets [3]string
	Target  string
	Body    string
	// Sign signs d with secret in place.
	Sign func(t testing.TB, secret string, d *Delivery)
	// Headers are the signature headers, each of which is required.
	Headers []string
	// Timestamped: the scheme signs a timestamp checked against
	// tolerance.
	Timestamped bool
	// Tamper changes the delivery in a way the signature must catch, when
	// changing a body byte is not it; nil from it means the scheme signs
	// no body.
	Tamper func(d *Delivery) []byte

	// The verify options the scheme is configured with, as in the
	// module's verify block.
	Header, Prefix, Algorithm, Encoding, URL, Padding string

	// Name tells cases of one scheme apart; Label is the scheme when it
	// is empty.
	Name string

	// Public, for schemes that verify with a public key, gives the
	// public key (as written in the module's public_key) of the private
	// key each secret names; the verifier gets public keys, not secrets.
	Public func(secret string) string
}

// Label names the case in tests.
func (c Case) Label() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Scheme
}

// Keys returns what the verifier of c is built with for these secrets:
// the secrets, or their public keys.
func (c Case) Keys(secrets []string) (secretValues, publicKeys []string) {
	if c.Public == nil {
		return secrets, nil
	}
	for _, s := range secrets {
		publicKeys = append(publicKeys, c.Public(s))
	}
	return nil, publicKeys
}

// Standard Webhooks secrets: two valid ones and a wrong one.
const StdSecretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var StdSecretB = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a second standard webhooks secret"))
var StdSecretC = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a wrong standard webhooks secret!"))

// Cases lists a case for every preset and generic scheme.
func Cases() []Case {
	return append([]Case{
		{
			Scheme:  "stripe",
			Secrets: [3]string{"whsec_test_secret_one", "whsec_test_secret_two", "whsec_wrong"},
			Body:    `{"id":"evt_1NG8Du2eZvKYlo2C","object":"event","type":"charge.succeeded"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: d.Body, Secret: secret, Timestamp: d.At})
				d.Req.Header.Set("Stripe-Signature", p.Header)
			},
			Headers:     []string{"Stripe-Signature"},
			Timestamped: true,
		},
		{
			Scheme:  "github",
			Secrets: [3]string{"gh-secret-1", "gh-secret-2", "gh-wrong"},
			Body:    `{"action":"opened","number":1}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				sig := "sha256=" + HMACHex(secret, string(d.Body))
				if err := github.ValidateSignature(sig, d.Body, []byte(secret)); err != nil {
					t.Fatalf("go-github rejects the helper's signature: %v", err)
				}
				d.Req.Header.Set("X-Hub-Signature-256", sig)
			},
			Headers: []string{"X-Hub-Signature-256"},
		},
		{
			Scheme:  "shopify",
			Secrets: [3]string{"shpss_one", "shpss_two", "shpss_wrong"},
			Body:    `{"id":820982911946154508,"email":"jon@example.com"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("X-Shopify-Hmac-Sha256", HMACBase64(secret, string(d.Body)))
			},
			Headers: []string{"X-Shopify-Hmac-Sha256"},
		},
		{
			// Shopify's Events deliveries name their headers without the
			// X- prefix (@shopify/shopify-api 15.0.0, ShopifyEventsHeader);
			// shopify-api-15.0.0.json holds deliveries the library judged
			Scheme:  "shopify",
			Name:    "shopify events",
			Secrets: [3]string{"shpss_one", "shpss_two", "shpss_wrong"},
			Body:    `{"id":820982911946154508,"email":"jon@example.com"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("Shopify-Hmac-Sha256", HMACBase64(secret, string(d.Body)))
				d.Req.Header.Set("Shopify-Topic", "orders/create")
				d.Req.Header.Set("Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043")
			},
			Headers: []string{"Shopify-Hmac-Sha256"},
		},
		{
			Scheme:  "slack",
			Secrets: [3]string{"8f742231b10e8888abcd99yyyzzz85a5", "e6b19c573432dcc6b075501d51b51bb8", "0000000000000000000000000000dead"},
			Body:    `{"type":"event_callback","event_id":"Ev0PV52K21"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := Unix(d.At)
				d.Req.Header.Set("X-Slack-Request-Timestamp", ts)
				d.Req.Header.Set("X-Slack-Signature", "v0="+HMACHex(secret, "v0:", ts, ":", string(d.Body)))
				if time.Since(d.At).Abs() < time.Minute {
					sv, err := slack.NewSecretsVerifier(d.Req.Header, secret)
					if err != nil {
						t.Fatalf("slack-go rejects the helper's Headers: %v", err)
					}
					sv.Write(d.Body)
					if err := sv.Ensure(); err != nil {
						t.Fatalf("slack-go rejects the helper's signature: %v", err)
					}
				}
			},
			Headers:     []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
			Timestamped: true,
		},
		StandardCase("standard", "webhook-"),
		StandardCase("svix", "svix-"),
		{
			Scheme:  "whatsapp",
			Secrets: [3]string{"meta-app-secret-1", "meta-app-secret-2", "meta-wrong"},
			Body:    `{"object":"whatsapp_business_account","entry":[{"id":"1"}]}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("X-Hub-Signature-256", "sha256="+HMACHex(secret, string(d.Body)))
			},
			Headers: []string{"X-Hub-Signature-256"},
		},
		{
			Scheme:  "ifood",
			Secrets: [3]string{"ifood-client-secret-1", "ifood-client-secret-2", "ifood-wrong"},
			Body:    `{"id":"cd40582b-0ef2-4d52-bc7c-507e9f7ea5c0","code":"PLC"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("X-IFood-Signature", HMACHex(secret, string(d.Body)))
			},
			Headers: []string{"X-IFood-Signature"},
		},
		{
			Scheme:  "mercadopago",
			Secrets: [3]string{"mp-secret-1", "mp-secret-2", "mp-wrong"},
			Target:  "/hooks/mp?data.id=ABC123&type=payment",
			Body:    `{"action":"payment.updated","data":{"id":"ABC123"},"type":"payment"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := Unix(d.At)
				reqID := "bb56a2f1-6aae-46ac-982e-9dcd3581d08e"
				// data.id is signed as received (Mercado Pago's SDKs)
				manifest := "id:ABC123;request-id:" + reqID + ";ts:" + ts + ";"
				d.Req.Header.Set("x-request-id", reqID)
				d.Req.Header.Set("x-signature", "ts="+ts+",v1="+HMACHex(secret, manifest))
			},
			Headers:     []string{"x-signature"},
			Timestamped: true,
			// the manifest does not cover the body; its data.id must match
			Tamper: func(d *Delivery) []byte {
				return bytes.Replace(d.Body, []byte("ABC123"), []byte("ABC124"), 1)
			},
		},
		{
			Scheme:  "pagbank",
			Secrets: [3]string{"pagbank-token-1", "pagbank-token-2", "pagbank-wrong"},
			Body:    `{"id":"ORDE_1","charges":[{"status":"PAID"}]}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				sum := sha256.Sum256([]byte(secret + "-" + string(d.Body)))
				d.Req.Header.Set("x-authenticity-token", hex.EncodeToString(sum[:]))
			},
			Headers: []string{"x-authenticity-token"},
		},
		{
			Scheme:  "paddle",
			Secrets: [3]string{"pdl_ntfset_01_one", "pdl_ntfset_01_two", "pdl_ntfset_01_wrong"},
			Body:    `{"event_id":"evt_01","notification_id":"ntf_01"}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := Unix(d.At)
				d.Req.Header.Set("Paddle-Signature", "ts="+ts+";h1="+HMACHex(secret, ts, ":", string(d.Body)))
				// the Paddle SDK checks the helper
				check := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(d.Body))
				check.Header = d.Req.Header.Clone()
				if ok, err := paddle.NewWebhookVerifier(secret).Verify(check); !ok || err != nil {
					t.Fatalf("paddle SDK rejects the helper's signature: %v %v", ok, err)
				}
			},
			Headers:     []string{"Paddle-Signature"},
			Timestamped: true,
		},
		{
			Scheme:  "twilio",
			Secrets: [3]string{"twilio-auth-token-1", "twilio-auth-token-2", "twilio-wrong"},
			Target:  "/sms?tenant=7",
			Body:    "To=%2B18005551212&From=%2B14158675309&Body=hello&MessageSid=SM1",
			URL:     "https://hooks.example.com/sms",
			Sign: func(t testing.TB, secret string, d *Delivery) {
				u := "https://hooks.example.com/sms?tenant=7"
				form, _ := url.ParseQuery(string(d.Body))
				names := make([]string, 0, len(form))
				for n := range form {
					names = append(names, n)
				}
				sort.Strings(names)
				msg := u
				for _, n := range names {
					msg += n + form.Get(n)
				}
				sig := base64.StdEncoding.EncodeToString(HMAC(sha1.New, []byte(secret), msg))
				v := twilio.NewRequestValidator(secret)
				if !v.ValidateBody(u, d.Body, sig) {
					t.Fatal("twilio-go rejects the helper's signature")
				}
				d.Req.Header.Set("X-Twilio-Signature", sig)
			},
			Headers: []string{"X-Twilio-Signature"},
			Tamper: func(d *Delivery) []byte {
				return bytes.Replace(d.Body, []byte("hello"), []byte("hellp"), 1)
			},
		},
		{
			// a SharedKey signature in HMAC-SHA256, named in
			// X-Twilio-Webhooks-Signature-Settings (Twilio, "Sign webhooks
			// with shared keys"); twilio-node-6.3.1.json holds deliveries
			// twilio-node signed and judged
			Scheme:  "twilio",
			Name:    "twilio sha256",
			Secrets: [3]string{"twilio-shared-key-1", "twilio-shared-key-2", "twilio-wrong"},
			Target:  "/sms?tenant=7",
			Body:    "To=%2B18005551212&From=%2B14158675309&Body=hello&MessageSid=SM1",
			URL:     "https://hooks.example.com/sms",
			Sign: func(t testing.TB, secret string, d *Delivery) {
				msg := "https://hooks.example.com/sms?tenant=7"
				form, _ := url.ParseQuery(string(d.Body))
				names := make([]string, 0, len(form))
				for n := range form {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					msg += n + form.Get(n)
				}
				d.Req.Header.Set("X-Twilio-Signature", HMACBase64(secret, msg))
				d.Req.Header.Set("X-Twilio-Webhooks-Signature-Settings", "key=KS0123456789abcdef0123456789abcdef,algorithm=HMAC_SHA256")
			},
			Headers: []string{"X-Twilio-Signature"},
			Tamper: func(d *Delivery) []byte {
				return bytes.Replace(d.Body, []byte("hello"), []byte("hellp"), 1)
			},
		},
		{
			Scheme:  "square",
			Secrets: [3]string{"square-sig-key-1", "square-sig-key-2", "square-wrong"},
			Target:  "/square",
			Body:    `{"merchant_id":"M1","event_id":"6a8f5f28-54a1-4eb0-a98a-3111513fd4fc"}`,
			URL:     "https://shop.example.com/square",
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("x-square-hmacsha256-signature", HMACBase64(secret, "https://shop.example.com/square", string(d.Body)))
			},
			Headers: []string{"x-square-hmacsha256-signature"},
		},
		tokenCase("gitlab", "X-Gitlab-Token", "",
			[3]string{"gitlab-token-1", "gitlab-token-2", "gitlab-wrong"}, `{"object_kind":"push"}`),
		configuredTokenCase("evolution", "apikey", "",
			[3]string{"evo-token-1", "evo-token-2", "evo-wrong"}, `{"event":"messages.upsert"}`),
		tokenCase("asaas", "asaas-access-token", "",
			[3]string{"asaas-webhook-token-one", "asaas-webhook-token-two", "asaas-wrong"},
			`{"id":"evt_05b708f961d739ea7eba7e4db318f621&368604920","event":"PAYMENT_RECEIVED","payment":{"object":"payment","id":"pay_080225913252"}}`),
		JWTCase("evolution"),
		JWTCase("jwt"),
		{
			Scheme:  "hmac",
			Secrets: [3]string{"generic-1", "generic-2", "generic-wrong"},
			Body:    `{"id":"x"}`,
			Header:  "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
			Sign: func(t testing.TB, secret string, d *Delivery) {
				m := hmac.New(sha512.New, []byte(secret))
				m.Write(d.Body)
				d.Req.Header.Set("X-Signature", "sha512="+base64.StdEncoding.EncodeToString(m.Sum(nil)))
			},
			Headers: []string{"X-Signature"},
		},
		configuredTokenCase("token", "Authorization", "Bearer ",
			[3]string{"tok-1", "tok-2", "tok-wrong"}, `{"id":"x"}`),
	}, moreCases()...)
}

// tokenCase is a scheme that sends a token in a header, after prefix. A
// token does not sign the body: tampering with it is not detectable.
func tokenCase(scheme, header, prefix string, secrets [3]string, body string) Case {
	return Case{
		Scheme:  scheme,
		Secrets: secrets,
		Body:    body,
		Sign: func(t testing.TB, secret string, d *Delivery) {
			d.Req.Header.Set(header, prefix+secret)
		},
		Headers: []string{header},
		Tamper:  func(d *Delivery) []byte { return nil },
	}
}

// configuredTokenCase is tokenCase for a scheme configured with the
// header and the prefix (the generic token scheme).
func configuredTokenCase(scheme, header, prefix string, secrets [3]string, body string) Case {
	c := tokenCase(scheme, header, prefix, secrets, body)
	c.Header, c.Prefix = header, prefix
	return c
}

// JWTCase is an HS256 JWT in `Authorization: Bearer`, claims as Evolution
// API makes them (WebhookController.generateJwtToken), signed with
// go-jose, another implementation than the verifier's golang-jwt. The
// secrets are 32 bytes or more, as go-jose demands of HS256 keys; the
// signature package's tests replay tokens made with a shorter key by
// jsonwebtoken, Evolution's own library.
func JWTCase(scheme string) Case {
	return Case{
		Scheme: scheme,
		Secrets: [3]string{
			"evolution-jwt-key-0123456789abcdef",
			"evolution-jwt-key-fedcba9876543210",
			"evolution-jwt-key-wrong-0000000000",
		},
		Body: `{"event":"messages.upsert","instance":"main","data":{"key":{"id":"3EB0C767D26A1D3A0B45"}}}`,
		Sign: func(t testing.TB, secret string, d *Delivery) {
			claims := fmt.Sprintf(`{"iat":%d,"exp":%d,"app":"evolution","action":"webhook"}`, d.At.Unix(), d.At.Add(10*time.Minute).Unix())
			d.Req.Header.Set("Authorization", "Bearer "+StoneJWS(t, []byte(claims), jose.HS256, []byte(secret), ""))
		},
		Headers: []string{"Authorization"},
		Tamper:  func(d *Delivery) []byte { return nil },
	}
}

// StandardCase is the Standard Webhooks case for headers named with prefix.
func StandardCase(scheme, prefix string) Case {
	return Case{
		Scheme:  scheme,
		Secrets: [3]string{StdSecretA, StdSecretB, StdSecretC},
		Body:    `{"type":"invoice.paid","data":{"id":"in_1"}}`,
		Sign: func(t testing.TB, secret string, d *Delivery) {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := wh.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", d.At, d.Body)
			if err != nil {
				t.Fatal(err)
			}
			d.Req.Header.Set(prefix+"id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")
			d.Req.Header.Set(prefix+"timestamp", Unix(d.At))
			// an unknown version and an asymmetric signature come first
			d.Req.Header.Set(prefix+"signature", "v2,bm9wZQ== v1a,bm9wZQ== "+sig)
		},
		Headers:     []string{prefix + "id", prefix + "timestamp", prefix + "signature"},
		Timestamped: true,
	}
}

// Delivery returns c's delivery at a time, signed with secret.
func (c Case) Delivery(t testing.TB, secret string, at time.Time) *Delivery {
	target := c.Target
	if target == "" {
		target = "/hook"
	}
	d := NewDelivery(target, []byte(c.Body), at)
	c.Sign(t, secret, d)
	return d
}
