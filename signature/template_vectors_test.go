package signature_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Providers written as templates, checked against what the providers
// publish: their own verifier (SendGrid), their test vectors (Adyen,
// PayPal), and deliveries their official validator accepted (Amazon SNS).

// SendGrid's Signed Event Webhook: ECDSA P-256 over `{timestamp}{body}`,
// base64 DER in X-Twilio-Email-Event-Webhook-Signature (Twilio SendGrid
// docs, "Getting started with the Event Webhook security features").
func sendGridConfig(publicKey string) signature.TemplateConfig {
	return signature.TemplateConfig{
		String:     `{header.X-Twilio-Email-Event-Webhook-Timestamp}{body}`,
		Algorithm:  signature.ECDSAP256SHA256,
		Signature:  signature.SignatureLocation{From: "header:X-Twilio-Email-Event-Webhook-Signature", Encoding: "base64", Format: "der"},
		Timestamp:  signature.TimestampLocation{From: "header:X-Twilio-Email-Event-Webhook-Timestamp"},
		PublicKeys: []string{publicKey},
	}
}

// sendGridVector is the test vector of sendgrid-go v3.16.1,
// helpers/eventwebhook/eventwebhook_test.go: the key, signature and
// timestamp constants, and the payload generateTestPayload makes.
var sendGridVector = struct{ publicKey, signature, timestamp string }{
	publicKey: "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==",
	signature: "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=",
	timestamp: "1600112502",
}

// sendGridPayload is generateTestPayload of that test: the event as Go's
// encoder writes it (keys sorted, HTML not escaped), ending in CRLF.
func sendGridPayload(t *testing.T) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode([]map[string]any{{
		"email":         "hello@world.com",
		"event":         "dropped",
		"reason":        "Bounced Address",
		"sg_event_id":   "ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",
		"sg_message_id": "LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",
		"smtp-id":       "<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>",
		"timestamp":     1600112492,
	}}); err != nil {
		t.Fatal(err)
	}
	p := buf.Bytes()
	return append(p[:len(p)-1], "\r\n"...)
}

func TestTemplateSendGridVector(t *testing.T) {
	signature.SetClock(t, time.Unix(1600112502, 0).Add(time.Minute))
	payload := sendGridPayload(t)
	pub, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(sendGridVector.publicKey)
	if err != nil {
		t.Fatal(err)
	}
	oracle := func(body []byte, sig, ts string) bool {
		ok, err := eventwebhook.VerifySignature(pub, body, sig, ts)
		return err == nil && ok
	}
	if !oracle(payload, sendGridVector.signature, sendGridVector.timestamp) {
		t.Fatal("sendgrid-go refuses its own vector: the payload is not the one it signed")
	}
	v, err := signature.NewTemplate(sendGridConfig(sendGridVector.publicKey))
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(body []byte, sig, ts string) *sigtest.Delivery {
		d := sigtest.NewDelivery("/sendgrid", body, time.Time{})
		d.Req.Header.Set(eventwebhook.VerificationHTTPHeader, sig)
		d.Req.Header.Set(eventwebhook.TimestampHTTPHeader, ts)
		return d
	}
	d := deliver(payload, sendGridVector.signature, sendGridVector.timestamp)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)

	// the changes sendgrid-go's test makes, refused by both
	changed := bytes.Replace(payload, []byte("dropped"), []byte("bounce"), 1)
	if oracle(changed, sendGridVector.signature, sendGridVector.timestamp) {
		t.Fatal("the oracle accepts a changed payload")
	}
	d = deliver(changed, sendGridVector.signature, sendGridVector.timestamp)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	d = deliver(payload, sendGridVector.signature, "1600112503")
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	d = deliver(payload, "corrupt"+sendGridVector.signature, sendGridVector.timestamp)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	d = deliver(payload, sendGridVector.signature, "")
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)
}

// Deliveries the template signer makes for SendGrid pass sendgrid-go's
// verifier, and the template refuses what sendgrid-go refuses.
func TestTemplateSendGridSignerAgainstSDK(t *testing.T) {
	key := ecdsaKey("sendgrid")
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubB64 := base64.StdEncoding.EncodeToString(der)
	cfg := sendGridConfig(pubB64)
	s, err := signature.NewTemplateSigner(cfg, key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := signature.NewTemplateSigner(cfg, ecdsaKey("not sendgrid"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(pubB64)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for _, c := range []struct {
		signer signature.Signer
		valid  bool
	}{{s, true}, {other, false}} {
		d := sigtest.NewDelivery("/sendgrid", []byte(`[{"event":"processed","sg_event_id":"a"}]`+"\r\n"), at)
		body, err := c.signer.Sign(d.Req, d.Body, at)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := eventwebhook.VerifySignature(pub, body, d.Req.Header.Get(eventwebhook.VerificationHTTPHeader), d.Req.Header.Get(eventwebhook.TimestampHTTPHeader))
		if err != nil || ok != c.valid {
			t.Fatalf("sendgrid-go: %v, %v; want %v", ok, err, c.valid)
		}
		if err := v.Verify(d.Req, body); (err == nil) != c.valid {
			t.Fatalf("the template: %v; want valid %v", err, c.valid)
		}
	}
}

// Adyen's standard webhooks: HMAC-SHA256 base64 of
// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
// per item, keyed with the hex-decoded HMAC key, in
// additionalData.hmacSignature (Adyen Docs, "Verify HMAC signatures";
// adyen-go-api-library src/hmacvalidator/hmacvalidator.go, GetDataToSign).
var adyenConfig = signature.TemplateConfig{
	String:         `{json.pspReference}:{json.originalReference}:{json.merchantAccountCode}:{json.merchantReference}:{json.amount.value}:{json.amount.currency}:{json.eventCode}:{json.success}`,
	Algorithm:      signature.HMACSHA256,
	Items:          "json:notificationItems.#.NotificationRequestItem",
	Signature:      signature.SignatureLocation{From: "json:additionalData.hmacSignature", Encoding: "base64"},
	SecretEncoding: "hex",
}

// The key and the signature of adyen-go-api-library's
// src/hmacvalidator/hmacvalidator_test.go (key, expectedSign), for its
// notificationRequestItem: data to sign
// `pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true`.
const (
	adyenKey = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
	adyenSig = "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="
)

// adyenItem is that test's notificationRequestItem as Adyen sends it in
// JSON, with fields replaced as given.
func adyenItem(sig string, replace ...string) string {
	item := `{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + sig + `"},` +
		`"amount":{"currency":"EUR","value":1000},"eventCode":"EVENT","eventDate":"1970-01-01T00:00:00+00:00",` +
		`"merchantAccountCode":"merchantAccount","merchantReference":"reference","originalReference":"originalReference",` +
		`"paymentMethod":"VISA","pspReference":"pspReference","reason":"reason","success":"true"}}`
	return strings.NewReplacer(replace...).Replace(item)
}

func adyenBody(items ...string) []byte {
	return []byte(`{"live":"false","notificationItems":[` + strings.Join(items, ",") + `]}`)
}

func TestTemplateAdyenVector(t *testing.T) {
	cfg := adyenConfig
	cfg.Secrets = []string{adyenKey}
	v, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// an item without originalReference signs it as empty ("Any fields
	// that are empty will have the value of an empty string", Adyen Docs):
	// the signature is computed here by that rule
	key, err := hex.DecodeString(adyenKey)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("pspReference::merchantAccount:reference:1000:EUR:EVENT:true"))
	noOriginal := base64.StdEncoding.EncodeToString(m.Sum(nil))

	for _, c := range []struct {
		name string
		body []byte
		want *signature.Error
	}{
		{"the library's vector", adyenBody(adyenItem(adyenSig)), nil},
		{"slashes escaped", adyenBody(adyenItem(strings.ReplaceAll(adyenSig, "/", `\/`))), nil},
		{"originalReference absent", adyenBody(adyenItem(noOriginal, `"originalReference":"originalReference",`, "")), nil},
		{"two items", adyenBody(adyenItem(adyenSig), adyenItem(noOriginal, `"originalReference":"originalReference",`, "")), nil},
		{"a changed amount", adyenBody(adyenItem(adyenSig, `"value":1000`, `"value":1001`)), signature.ErrInvalid},
		{"success changed", adyenBody(adyenItem(adyenSig, `"success":"true"`, `"success":"false"`)), signature.ErrInvalid},
		{"an empty originalReference signed as present", adyenBody(adyenItem(adyenSig, `"originalReference":"originalReference"`, `"originalReference":""`)), signature.ErrInvalid},
		{"one good item, one bad", adyenBody(adyenItem(adyenSig), adyenItem(adyenSig, "pspReference\"", "pspReference2\"")), signature.ErrInvalid},
		{"the signature invalid", adyenBody(adyenItem("InvalidSignature")), signature.ErrInvalid},
		{"no signature", adyenBody(adyenItem(adyenSig, `"additionalData":{"hmacSignature":"`+adyenSig+`"},`, "")), signature.ErrMissing},
		{"no items", adyenBody(), signature.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := sigtest.NewDelivery("/adyen", c.body, time.Time{})
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
		})
	}

	cfg.Secrets = []string{"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"}
	wrong, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := sigtest.NewDelivery("/adyen", adyenBody(adyenItem(adyenSig)), time.Time{})
	sigtest.WantReason(t, wrong.Verify(d.Req, d.Body), signature.ErrInvalid)
}

// Amazon SNS: RSA (SHA-1 for SignatureVersion 1, SHA-256 for 2) over
// `Key\nValue\n` for the message's keys in byte order, present keys only
// (Amazon SNS Developer Guide, "Verifying the signatures of Amazon SNS
// messages"; aws-php-sns-message-validator's getStringToSign), the key
// from the certificate at SigningCertURL.
const snsString = `Message\n{json.Message}\nMessageId\n{json.MessageId}\n[Subject\n{json.Subject}\n]` +
	`[SubscribeURL\n{json.SubscribeURL}\n]Timestamp\n{json.Timestamp}\n[Token\n{json.Token}\n]` +
	`TopicArn\n{json.TopicArn}\nType\n{json.Type}\n`

// snsVectors are the deliveries of testdata/sns-validator-0.3.5.json.
type snsVectors struct {
	ProducedBy  string `json:"produced_by"`
	RootCA      string `json:"root_ca"`
	SigningCert string `json:"signing_cert"`
	Vectors     []struct {
		Name  string `json:"name"`
		Body  string `json:"body"`
		Valid bool   `json:"valid"`
	} `json:"vectors"`
}

const snsCertURL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem"

func TestTemplateSNSValidatorVectors(t *testing.T) {
	var vecs snsVectors
	loadJSON(t, "sns-validator-0.3.5.json", &vecs)
	srv := newCertServer(t, map[string][]byte{
		"/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem": []byte(vecs.SigningCert),
	})
	v, err := signature.NewTemplate(signature.TemplateConfig{
		String:          snsString,
		AlgorithmField:  "json:SignatureVersion",
		AlgorithmValues: map[string]string{"1": signature.RSASHA1, "2": signature.RSASHA256},
		Signature:       signature.SignatureLocation{From: "json:Signature", Encoding: "base64"},
		CertURL: signature.CertURLConfig{
			From:       "json:SigningCertURL",
			Hosts:      []string{`127\.0\.0\.1`}, // the preset's: sns\.[a-zA-Z0-9-]{3,}\.amazonaws\.com(\.cn)?
			Paths:      []string{`/SimpleNotificationService-[0-9a-f]+\.pem`},
			Roots:      pool(t, vecs.RootCA),
			HTTPClient: srv.Client(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	local := srv.URL + "/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem"
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			// SigningCertURL is not signed: the certificate is served here
			body := strings.NewReplacer(snsCertURL, local, strings.ReplaceAll(snsCertURL, "/", `\/`), strings.ReplaceAll(local, "/", `\/`)).Replace(vec.Body)
			if body == vec.Body {
				t.Fatal("the vector has no SigningCertURL")
			}
			d := sigtest.NewDelivery("/sns", []byte(body), time.Time{})
			err := v.Verify(d.Req, d.Body)
			if vec.Valid {
				sigtest.WantReason(t, err, nil)
				changed := strings.Replace(body, `"Timestamp": "2026`, `"Timestamp": "2027`, 1)
				sigtest.WantReason(t, v.Verify(d.Req, []byte(changed)), signature.ErrInvalid)
			} else {
				sigtest.WantReason(t, err, signature.ErrInvalid)
			}
		})
	}
	if hits := srv.hits.Load(); hits != 1 {
		t.Errorf("the certificate was fetched %d times, want once (cached by URL)", hits)
	}
	// the URL as sent names Amazon's host, which this configuration does
	// not allow: refused before any request
	d := sigtest.NewDelivery("/sns", []byte(vecs.Vectors[0].Body), time.Time{})
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	if hits := srv.hits.Load(); hits != 1 {
		t.Errorf("%d fetches after a URL off the hosts, want 1", hits)
	}
}

// PayPal: RSA-SHA256 over
// `{transmission id}|{transmission time}|{webhook id}|{crc32 of the body}`,
// the key from the certificate at PAYPAL-CERT-URL (PayPal-Java-SDK,
// Event.validateReceivedEvent), as in testdata/paypal-java-sdk.json.
type payPalVector struct {
	Source      string            `json:"source"`
	WebhookID   string            `json:"webhook_id"`
	Headers     map[string]string `json:"headers"`
	Body        string            `json:"body"`
	Cert        string            `json:"cert"`
	TrustAnchor string            `json:"trust_anchor"`
}

func payPalTemplate(t *testing.T, vec payPalVector, srv *certServer, webhookID string, tolerance time.Duration) signature.Verifier {
	t.Helper()
	v, err := signature.NewTemplate(signature.TemplateConfig{
		String:          `{header.Paypal-Transmission-Id}|{header.Paypal-Transmission-Time}|` + webhookID + `|{body.crc32}`,
		AlgorithmField:  "header:Paypal-Auth-Algo",
		AlgorithmValues: map[string]string{"SHA256withRSA": signature.RSASHA256},
		Signature:       signature.SignatureLocation{From: "header:Paypal-Transmission-Sig", Encoding: "base64"},
		Timestamp:       signature.TimestampLocation{From: "header:Paypal-Transmission-Time", Unit: "rfc3339"},
		Tolerance:       tolerance,
		CertURL: signature.CertURLConfig{
			From:       "header:Paypal-Cert-Url",
			Hosts:      []string{`127\.0\.0\.1`}, // PayPal's: api(-m)?(\.sandbox)?\.paypal\.com
			Subjects:   []string{`messageverificationcerts(\.sandbox)?\.paypal\.com`},
			Roots:      pool(t, vec.TrustAnchor),
			HTTPClient: srv.Client(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTemplatePayPalVector(t *testing.T) {
	var vec payPalVector
	loadJSON(t, "paypal-java-sdk.json", &vec)
	srv := newCertServer(t, map[string][]byte{"/v1/notifications/certs/CERT-test": []byte(vec.Cert)})
	deliver := func(edit func(h http.Header)) *sigtest.Delivery {
		d := sigtest.NewDelivery("/paypal", []byte(vec.Body), time.Time{})
		for k, val := range vec.Headers {
			d.Req.Header.Set(k, val)
		}
		d.Req.Header.Set("Paypal-Cert-Url", srv.URL+"/v1/notifications/certs/CERT-test")
		if edit != nil {
			edit(d.Req.Header)
		}
		return d
	}
	sent, err := time.Parse(time.RFC3339, vec.Headers["PAYPAL-TRANSMISSION-TIME"])
	if err != nil {
		t.Fatal(err)
	}
	signature.SetClock(t, sent.Add(time.Minute))
	v := payPalTemplate(t, vec, srv, vec.WebhookID, 0)

	d := deliver(nil)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	// one changed byte of the body changes its CRC-32
	sigtest.WantReason(t, v.Verify(d.Req, []byte(strings.Replace(vec.Body, "T-Shirt", "t-Shirt", 1))), signature.ErrInvalid)
	// the SDK's testInvalidWebhookId
	other := payPalTemplate(t, vec, srv, "NotToBeFound", 0)
	sigtest.WantReason(t, other.Verify(d.Req, d.Body), signature.ErrInvalid)
	// an algorithm not in the map (the SDK's testInvalidAuthAlgo)
	d = deliver(func(h http.Header) { h.Set("Paypal-Auth-Algo", "NotToBeFound") })
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	d = deliver(func(h http.Header) { h.Del("Paypal-Transmission-Sig") })
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)

	// a year later: stale, and with a tolerance of years, the certificate
	// (which expired in 2019) is refused
	signature.SetClock(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	d = deliver(nil)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)
	lenient := payPalTemplate(t, vec, srv, vec.WebhookID, 10*365*24*time.Hour)
	sigtest.WantReason(t, lenient.Verify(d.Req, d.Body), signature.ErrInvalid)
}

// Amazon SNS's own messages and signing certificate, as the AWS SDK for
// Java v2 keeps them (testdata/sns-aws-sdk-java-v2.json), through the
// configuration of the module's sns preset: SNS serves its certificate
// without the intermediate that issued it, so no chain to the system's
// roots can be built, and the certificate is trusted for having come from
// an SNS host, its dates and name checked, as AWS's validators trust it.
func TestTemplateSNSAWSMessages(t *testing.T) {
	var vecs struct {
		SigningCert string `json:"signing_cert"`
		Vectors     []struct{ Name, Body string }
	}
	loadJSON(t, "sns-aws-sdk-java-v2.json", &vecs)
	signature.SetClock(t, time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC))
	srv := newCertServer(t, map[string][]byte{"/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem": []byte(vecs.SigningCert)})
	cfg := func(origin bool) signature.TemplateConfig {
		c := signature.TemplateConfig{
			String:          snsString,
			AlgorithmField:  "json:SignatureVersion",
			AlgorithmValues: map[string]string{"1": signature.RSASHA1, "2": signature.RSASHA256},
			Signature:       signature.SignatureLocation{From: "json:Signature", Encoding: "base64"},
			CertURL: signature.CertURLConfig{
				From:  "json:SigningCertURL",
				Hosts: []string{`127\.0\.0\.1`}, // the preset's: sns\.[a-zA-Z0-9-]{3,}\.amazonaws\.com(\.cn)?
				Paths: []string{`/[^/]+\.pem`},
				Subjects: []string{`sns\.amazonaws\.com(\.cn)?`, `sns-[a-z0-9-]+\.amazonaws\.com(\.cn)?`,
					`(sns|sns-signing)\.[a-z0-9-]+\.amazonaws\.com(\.cn)?`},
				TrustOrigin: origin,
				HTTPClient:  srv.Client(),
			},
			Claims: map[string][]string{"TopicArn": {"arn:aws:sns:us-west-2:131990247566:dongie-standard-topic"}},
		}
		if !origin {
			c.CertURL.Roots = nil // the system's
		}
		return c
	}
	v, err := signature.NewTemplate(cfg(true))
	if err != nil {
		t.Fatal(err)
	}
	local := srv.URL + "/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem"
	deliver := func(body string) *sigtest.Delivery {
		// SigningCertURL is not signed: the certificate is served here
		body = strings.Replace(body, "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-7506a1e35b36ef5a444dd1a8e7cc3ed8.pem", local, 1)
		return sigtest.NewDelivery("/sns", []byte(body), time.Time{})
	}
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			d := deliver(vec.Body)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
			changed := deliver(strings.Replace(vec.Body, `"Timestamp" : "2026-03-06T`, `"Timestamp" : "2026-03-07T`, 1))
			sigtest.WantReason(t, v.Verify(changed.Req, changed.Body), signature.ErrInvalid)
		})
	}
	// the same certificate, checked for a chain to the system's roots:
	// every real SNS message would be refused
	chainCfg := cfg(false)
	fetchErr := make(chan error, 1)
	chainCfg.CertURL.OnError = func(_ string, err error) { fetchErr <- err }
	chain, err := signature.NewTemplate(chainCfg)
	if err != nil {
		t.Fatal(err)
	}
	d := deliver(vecs.Vectors[1].Body)
	sigtest.WantReason(t, chain.Verify(d.Req, d.Body), signature.ErrInvalid)
	if err := <-fetchErr; !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("refused for %v, want no chain to the system's roots", err)
	}
	// after the certificate's expiry, refused as well
	signature.SetClock(t, time.Date(2026, 10, 15, 0, 0, 0, 0, time.UTC))
	later, err := signature.NewTemplate(cfg(true))
	if err != nil {
		t.Fatal(err)
	}
	d = deliver(vecs.Vectors[1].Body)
	sigtest.WantReason(t, later.Verify(d.Req, d.Body), signature.ErrInvalid)
}
