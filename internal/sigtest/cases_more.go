package sigtest

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
)

// Ed25519Key is the Ed25519 private key a secret names (derived from it,
// so tests are reproducible).
func Ed25519Key(secret string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(secret))
	return ed25519.NewKeyFromSeed(seed[:])
}

// Ed25519Public is the public key of Ed25519Key(secret).
func Ed25519Public(secret string) ed25519.PublicKey {
	return Ed25519Key(secret).Public().(ed25519.PublicKey)
}

var rsaKeys = struct {
	sync.Mutex
	m map[string]*rsa.PrivateKey
}{m: map[string]*rsa.PrivateKey{}}

// RSAKey is the 2048-bit RSA private key a secret names, generated on
// first use and kept for the test binary's life.
func RSAKey(secret string) *rsa.PrivateKey {
	rsaKeys.Lock()
	defer rsaKeys.Unlock()
	if k, ok := rsaKeys.m[secret]; ok {
		return k
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	rsaKeys.m[secret] = k
	return k
}

// PEMPublic is the PKIX PEM of a public key.
func PEMPublic(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// WHPK is a public key in the Standard Webhooks format, `whpk_` and base64.
func WHPK(pub ed25519.PublicKey) string {
	return "whpk_" + base64.StdEncoding.EncodeToString(pub)
}

// RSASign signs the hash of msg with PKCS #1 v1.5, or PSS.
func RSASign(key *rsa.PrivateKey, h crypto.Hash, pss bool, msg []byte) []byte {
	hh := h.New()
	hh.Write(msg)
	var sig []byte
	var err error
	if pss {
		sig, err = rsa.SignPSS(rand.Reader, key, h, hh.Sum(nil), nil)
	} else {
		sig, err = rsa.SignPKCS1v15(rand.Reader, key, h, hh.Sum(nil))
	}
	if err != nil {
		panic(err)
	}
	return sig
}

// HubSpotURL applies the decoding HubSpot's "Validating requests" lists
// for the URL it signs.
var HubSpotURL = strings.NewReplacer(
	"%3A", ":", "%2F", "/", "%3F", "?", "%40", "@", "%21", "!", "%24", "$",
	"%27", "'", "%28", "(", "%29", ")", "%2A", "*", "%2C", ",", "%3B", ";",
).Replace

// moreCases are the cases of the presets verified with public keys, of
// Twitch, Zoom, Linear, Razorpay and HubSpot, and of the generic ed25519
// and rsa schemes.
func moreCases() []Case {
	return []Case{
		{
			Scheme:  "discord",
			Secrets: [3]string{"discord-app-1", "discord-app-2", "discord-wrong"},
			Body:    `{"type":2,"id":"1077353146577514496","application_id":"11","token":"t","data":{"name":"ping"}}`,
			Public:  func(s string) string { return hex.EncodeToString(Ed25519Public(s)) },
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := Unix(d.At)
				sig := ed25519.Sign(Ed25519Key(secret), append([]byte(ts), d.Body...))
				d.Req.Header.Set("X-Signature-Timestamp", ts)
				d.Req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(sig))
				// discordgo checks the helper
				check := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(d.Body))
				check.Header = d.Req.Header.Clone()
				if !discordgo.VerifyInteraction(check, Ed25519Public(secret)) {
					t.Fatal("discordgo rejects the helper's signature")
				}
			},
			Headers:     []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
			Timestamped: true,
		},
		{
			Scheme:  "standard",
			Name:    "standard v1a",
			Secrets: [3]string{"std-ed-1", "std-ed-2", "std-ed-wrong"},
			Body:    `{"type":"invoice.paid","data":{"id":"in_2"}}`,
			Public:  func(s string) string { return WHPK(Ed25519Public(s)) },
			Sign: func(t testing.TB, secret string, d *Delivery) {
				SignStandardV1a(d, "webhook-", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", Ed25519Key(secret))
				// a symmetric signature that matches nothing comes first
				d.Req.Header.Set("webhook-signature", "v1,bm9wZQ== "+d.Req.Header.Get("webhook-signature"))
			},
			Headers:     []string{"webhook-id", "webhook-timestamp", "webhook-signature"},
			Timestamped: true,
		},
		{
			Scheme:  "twitch",
			Secrets: [3]string{"twitch-secret-0001", "twitch-secret-0002", "twitch-wrong-0003"},
			Body:    `{"subscription":{"id":"f1c2a387","type":"channel.follow","version":"2"},"event":{"user_id":"1337"}}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				id := "e76c6bd4-55c9-4987-8304-da1588d8988b"
				ts := d.At.UTC().Format(time.RFC3339Nano)
				d.Req.Header.Set("Twitch-Eventsub-Message-Id", id)
				d.Req.Header.Set("Twitch-Eventsub-Message-Timestamp", ts)
				d.Req.Header.Set("Twitch-Eventsub-Message-Type", "notification")
				d.Req.Header.Set("Twitch-Eventsub-Message-Signature", "sha256="+HMACHex(secret, id, ts, string(d.Body)))
			},
			Headers:     []string{"Twitch-Eventsub-Message-Id", "Twitch-Eventsub-Message-Timestamp", "Twitch-Eventsub-Message-Signature"},
			Timestamped: true,
		},
		{
			Scheme:  "zoom",
			Secrets: [3]string{"zoom-secret-token-1", "zoom-secret-token-2", "zoom-wrong"},
			Body:    `{"event":"meeting.started","event_ts":1626230691572,"payload":{"account_id":"AAAAAABBBB","object":{"id":"1234567890"}}}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := Unix(d.At)
				d.Req.Header.Set("x-zm-request-timestamp", ts)
				d.Req.Header.Set("x-zm-signature", "v0="+HMACHex(secret, "v0:", ts, ":", string(d.Body)))
			},
			Headers:     []string{"x-zm-signature", "x-zm-request-timestamp"},
			Timestamped: true,
		},
		{
			Scheme:  "linear",
			Secrets: [3]string{"lin_wh_secret_1", "lin_wh_secret_2", "lin_wh_wrong"},
			// Linear signs webhookTimestamp, in milliseconds, in the body
			Body: `{"action":"create","type":"Issue","data":{"id":"2174add1"},"webhookTimestamp":0}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.SetBody(bytes.Replace(d.Body, []byte(`"webhookTimestamp":0`), []byte(`"webhookTimestamp":`+strconv.FormatInt(d.At.UnixMilli(), 10)), 1))
				d.Req.Header.Set("Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72")
				d.Req.Header.Set("Linear-Signature", HMACHex(secret, string(d.Body)))
			},
			Headers:     []string{"Linear-Signature"},
			Timestamped: true,
		},
		{
			Scheme:  "razorpay",
			Secrets: [3]string{"rzp-webhook-secret-1", "rzp-webhook-secret-2", "rzp-wrong"},
			Body:    `{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM"}}}}`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				d.Req.Header.Set("x-razorpay-event-id", "KjvVMd1NIFyiAK")
				d.Req.Header.Set("X-Razorpay-Signature", HMACHex(secret, string(d.Body)))
			},
			Headers: []string{"X-Razorpay-Signature"},
		},
		{
			Scheme:  "woovi",
			Secrets: [3]string{"rsa-1", "rsa-2", "rsa-wrong"},
			Body:    `{"event":"OPENPIX:CHARGE_COMPLETED","charge":{"status":"COMPLETED","correlationID":"4979ceba"}}`,
			Public:  func(s string) string { return PEMPublic(&RSAKey(s).PublicKey) },
			Sign: func(t testing.TB, secret string, d *Delivery) {
				sig := RSASign(RSAKey(secret), crypto.SHA256, false, d.Body)
				d.Req.Header.Set("x-webhook-signature", base64.StdEncoding.EncodeToString(sig))
			},
			Headers: []string{"x-webhook-signature"},
		},
		{
			Scheme:  "hubspot",
			Secrets: [3]string{"yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyy1", "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyy2", "yyyyyyyy-wrong"},
			Target:  "/hubspot?portal=62515&return=a%3Ab%2Fc%20d",
			URL:     "https://hooks.example.com/hubspot",
			Body:    `[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123}]`,
			Sign: func(t testing.TB, secret string, d *Delivery) {
				ts := strconv.FormatInt(d.At.UnixMilli(), 10)
				signed := HubSpotURL("https://hooks.example.com/hubspot?portal=62515&return=a%3Ab%2Fc%20d")
				d.Req.Header.Set("X-HubSpot-Request-Timestamp", ts)
				d.Req.Header.Set("X-HubSpot-Signature-v3", HMACBase64(secret, http.MethodPost, signed, string(d.Body), ts))
			},
			Headers:     []string{"X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp"},
			Timestamped: true,
		},
		{
			Scheme:  "ed25519",
			Secrets: [3]string{"ed-1", "ed-2", "ed-wrong"},
			Body:    `{"id":"evt_ed"}`,
			Header:  "X-Signature", Encoding: "base64", Prefix: "ed25519=",
			Public: func(s string) string { return PEMPublic(Ed25519Public(s)) },
			Sign: func(t testing.TB, secret string, d *Delivery) {
				sig := ed25519.Sign(Ed25519Key(secret), d.Body)
				d.Req.Header.Set("X-Signature", "ed25519="+base64.StdEncoding.EncodeToString(sig))
			},
			Headers: []string{"X-Signature"},
		},
		{
			Scheme:  "rsa",
			Secrets: [3]string{"rsa-1", "rsa-2", "rsa-wrong"},
			Body:    `{"id":"evt_rsa"}`,
			Header:  "X-Signature", Algorithm: "sha512", Padding: "pss", Encoding: "hex",
			// PKCS #1 PEM, a form the parser must accept too
			Public: func(s string) string {
				return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&RSAKey(s).PublicKey)}))
			},
			Sign: func(t testing.TB, secret string, d *Delivery) {
				sig := RSASign(RSAKey(secret), crypto.SHA512, true, d.Body)
				d.Req.Header.Set("X-Signature", hex.EncodeToString(sig))
			},
			Headers: []string{"X-Signature"},
		},
	}
}

// SignStandardV1a signs d as Standard Webhooks' asymmetric `v1a`: an
// Ed25519 signature of `{id}.{timestamp}.{body}`, in base64, on the
// headers named with prefix.
func SignStandardV1a(d *Delivery, prefix, id string, key ed25519.PrivateKey) {
	ts := Unix(d.At)
	sig := ed25519.Sign(key, []byte(id+"."+ts+"."+string(d.Body)))
	d.Req.Header.Set(prefix+"id", id)
	d.Req.Header.Set(prefix+"timestamp", ts)
	d.Req.Header.Set(prefix+"signature", "v1a,"+base64.StdEncoding.EncodeToString(sig))
}
