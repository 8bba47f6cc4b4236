package signature_test

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Woovi's example payload and signature, as published on "Validando
// Webhook payload usando x-webhook-signature" and used as the fixture of
// the tests of Woovi's PHP SDK (WebhooksTest.php) and Java SDK.
const (
	wooviPayload   = `{ "pixQrCode": null, "charge": { "status": "COMPLETED", "customer": { "name": "Antonio Victor", "taxID": { "taxID": "12345678976", "type": "BR:CPF" }, "email": "antoniocliente@example.com", "correlationID": "4979ceba-2132-4292-bd90-bee7fb2125e4" }, "value": 1000, "comment": "Pagamento OpenPix", "transactionID": "ea83401ed4834b3ea6f1f283b389af29", "correlationID": "417bae21-3d08-4cdb-9c2d-fee63c89e9e4", "paymentLinkID": "34697ed2-3790-4b60-8512-e7465b142d84", "createdAt": "2021-03-12T12:43:54.528Z", "updatedAt": "2021-03-12T12:44:09.360Z", "brCode": "https://api.openpix.com.br/openpix/openpix/testing?transactionID=ea83401ed4834b3ea6f1f283b389af29" }, "pix": { "charge": { "status": "COMPLETED", "customer": { "name": "Antonio Victor", "taxID": { "taxID": "12345678976", "type": "BR:CPF" }, "email": "antoniocliente@example.com", "correlationID": "4979ceba-2132-4292-bd90-bee7fb2125e4" }, "value": 1000, "comment": "Pagamento OpenPix", "transactionID": "ea83401ed4834b3ea6f1f283b389af29", "correlationID": "417bae21-3d08-4cdb-9c2d-fee63c89e9e4", "paymentLinkID": "34697ed2-3790-4b60-8512-e7465b142d84", "createdAt": "2021-03-12T12:43:54.528Z", "updatedAt": "2021-03-12T12:44:09.360Z" }, "customer": { "correlationID": "9134e286-6f71-427a-bf00-241681624586", "email": "email1@example.com", "name": "Loma", "phone": "+5511999999999", "taxID": { "taxID": "47043622050", "type": "BR:CPF" } }, "payer": { "correlationID": "9134e286-6f71-427a-bf00-241681624586", "email": "email1@example.com", "name": "Loma", "phone": "+5511999999999", "taxID": { "taxID": "47043622050", "type": "BR:CPF" } }, "time": "2021-03-12T12:44:09.269Z", "value": 1, "transactionID": "ea83401ed4834b3ea6f1f283b389af29", "infoPagador": "OpenPix testing" }, "company": { "id": "624f46f9e93f9f521c8308d7", "name": "Pizzaria do José", "taxID": "4722767300014" }, "account": { "clientId": "ZOJ64B9B-ZM1W-89MI-4UCI-OP2LVIU6NY75" } }`
	wooviSignature = "lL2nnXgmLFGgxJ8+jCDguqouU4ucrIxYJcU5SPrJFaNcJajTJHYVldqc/z4YFIjAjtPEALe699WosgPY08W7CLpidvtm06Qwa4YMB0l/DcTS93O91NdSH/adjugEKiOb76Zj/0jB8mqOmWCFYbweOBa17bssuEkd5Lw7Q5L314Y="
	// the same key as Woovi's docs give it for their PHP example: the
	// base64 of the PEM
	wooviKeyBase64 = "LS0tLS1CRUdJTiBQVUJMSUMgS0VZLS0tLS0KTUlHZk1BMEdDU3FHU0liM0RRRUJBUVVBQTRHTkFEQ0JpUUtCZ1FDLytOdElranpldnZxRCtJM01NdjNiTFhEdApwdnhCalk0QnNSclNkY2EzcnRBd01jUllZdnhTbmQ3amFnVkxwY3RNaU94UU84aWVVQ0tMU1dIcHNNQWpPL3paCldNS2Jxb0c4TU5waS91M2ZwNnp6MG1jSENPU3FZc1BVVUcxOWJ1VzhiaXM1WloySVpnQk9iV1NwVHZKMGNuajYKSEtCQUE4MkpsbitsR3dTMU13SURBUUFCCi0tLS0tRU5EIFBVQkxJQyBLRVktLS0tLQo="
)

func TestVerifyWooviPublishedKey(t *testing.T) {
	key, err := signature.ParseRSAPublicKey(signature.WooviPublicKey)
	if err != nil {
		t.Fatal(err)
	}
	// Woovi's public-keys endpoint identifies its key by the SHA-256 of
	// the DER
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if id := sha256.Sum256(der); hex.EncodeToString(id[:]) != "9dce618794f8986c603915a51b7029126c260e5cfdb2aa47e131d837fd62311c" {
		t.Fatalf("key_identifier %x", id)
	}
	fromDocs, err := signature.ParseRSAPublicKey(wooviKeyBase64)
	if err != nil || !fromDocs.Equal(key) {
		t.Fatalf("the base64 form of the docs: %v", err)
	}

	v, err := signature.NewWoovi(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := sigtest.NewDelivery("/woovi", []byte(wooviPayload), time.Time{})
	d.Req.Header.Set("x-webhook-signature", wooviSignature)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, ' ')), signature.ErrInvalid)
	d.Req.Header.Del("x-webhook-signature")
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)

	// a key given replaces the published one
	other, err := signature.NewWoovi([]*rsa.PublicKey{&sigtest.RSAKey("rsa-1").PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	d.Req.Header.Set("x-webhook-signature", wooviSignature)
	sigtest.WantReason(t, other.Verify(d.Req, d.Body), signature.ErrInvalid)
}

func TestVerifyHubSpotPublishedVector(t *testing.T) {
	// hubspot-api-python, tests/spec/utils/test_signature.py,
	// test_get_signature__v3: the timestamp is in milliseconds
	signature.SetClock(t, time.UnixMilli(15000000).Add(time.Minute))
	v := signature.NewHubSpot([]string{"yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"}, configuredURL("https://www.example.com/webhook_uri"), 0)
	body := []byte("{'example_field':'example_value'}")
	d := sigtest.NewDelivery("/webhook_uri", body, time.Time{})
	d.Req.Header.Set("X-HubSpot-Request-Timestamp", "15000000")
	d.Req.Header.Set("X-HubSpot-Signature-v3", "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=")
	sigtest.WantReason(t, v.Verify(d.Req, body), nil)
	sigtest.WantReason(t, v.Verify(d.Req, append(body, ' ')), signature.ErrInvalid)
	// the method is signed
	d.Req.Method = "PUT"
	sigtest.WantReason(t, v.Verify(d.Req, body), signature.ErrInvalid)
	d.Req.Method = "POST"
	// HubSpot's five minutes are the default tolerance
	signature.SetClock(t, time.UnixMilli(15000000).Add(6*time.Minute))
	sigtest.WantReason(t, v.Verify(d.Req, body), signature.ErrTimestamp)
}

func TestVerifyStandardWebhooksMixedKeys(t *testing.T) {
	edKey := sigtest.Ed25519Key("std-mixed")
	whpk := sigtest.WHPK(sigtest.Ed25519Public("std-mixed"))
	for _, prefix := range []string{"webhook-", "svix-"} {
		v, err := signature.NewStandardWebhooks(prefix, []string{sigtest.StdSecretA, whpk}, 0)
		if err != nil {
			t.Fatal(err)
		}
		std := sigtest.StandardCase("standard", prefix)
		symmetric := std.Delivery(t, sigtest.StdSecretA, time.Now())
		sigtest.WantReason(t, v.Verify(symmetric.Req, symmetric.Body), nil)

		asym := sigtest.NewDelivery("/", []byte(std.Body), time.Now())
		sigtest.SignStandardV1a(asym, prefix, "msg_1", edKey)
		sigtest.WantReason(t, v.Verify(asym.Req, asym.Body), nil)
		sigtest.WantReason(t, v.Verify(asym.Req, append(asym.Body, ' ')), signature.ErrInvalid)

		// a list of both kinds passes on the valid entry, in any order
		v1a := strings.TrimPrefix(asym.Req.Header.Get(prefix+"signature"), "v1a,")
		forgedV1 := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))
		forgedV1a := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
		for _, h := range []string{forgedV1 + " v1a," + v1a, "v1a," + v1a + " " + forgedV1, forgedV1a + " v1a," + v1a} {
			asym.Req.Header.Set(prefix+"signature", h)
			sigtest.WantReason(t, v.Verify(asym.Req, asym.Body), nil)
		}
		// a v1a signature is not taken for a v1 one
		asym.Req.Header.Set(prefix+"signature", "v1,"+v1a)
		sigtest.WantReason(t, v.Verify(asym.Req, asym.Body), signature.ErrInvalid)

		// without a public key, v1a signatures are not accepted
		hmacOnly, _ := signature.NewStandardWebhooks(prefix, []string{sigtest.StdSecretA}, 0)
		asym.Req.Header.Set(prefix+"signature", "v1a,"+v1a)
		sigtest.WantReason(t, hmacOnly.Verify(asym.Req, asym.Body), signature.ErrInvalid)
	}

	// a secret key is refused with a message that says what to give
	_, err := signature.NewStandardWebhooks("webhook-", []string{"whsk_" + base64.StdEncoding.EncodeToString(edKey)}, 0)
	if err == nil || !strings.Contains(err.Error(), "whpk_") || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(edKey)) {
		t.Fatalf("whsk_: %v", err)
	}
	if _, err := signature.NewStandardWebhooks("webhook-", []string{"whpk_AAAA"}, 0); err == nil {
		t.Fatal("a short whpk_ key was accepted")
	}
}

func TestVerifyAsymmetricSignaturesAreCapped(t *testing.T) {
	key := sigtest.Ed25519Key("ed-cap")
	v, err := signature.NewEd25519("X-Sig", "", signature.Hex, []ed25519.PublicKey{sigtest.Ed25519Public("ed-cap")})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":1}`)
	good := hex.EncodeToString(ed25519.Sign(key, body))
	bad := strings.Repeat("00", 64)
	for n, want := range map[int]*signature.Error{3: nil, 4: signature.ErrInvalid} {
		d := sigtest.NewDelivery("/", body, time.Time{})
		for i := 0; i < n; i++ {
			d.Req.Header.Add("X-Sig", bad)
		}
		d.Req.Header.Add("X-Sig", good)
		sigtest.WantReason(t, v.Verify(d.Req, body), want)
	}
	// the same cap in a Standard Webhooks list
	std, _ := signature.NewStandardWebhooks("webhook-", []string{sigtest.WHPK(sigtest.Ed25519Public("ed-cap"))}, 0)
	d := sigtest.NewDelivery("/", body, time.Now())
	sigtest.SignStandardV1a(d, "webhook-", "msg_cap", key)
	valid := d.Req.Header.Get("webhook-signature")
	forged := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
	d.Req.Header.Set("webhook-signature", strings.Repeat(forged+" ", 3)+valid)
	sigtest.WantReason(t, std.Verify(d.Req, body), nil)
	d.Req.Header.Set("webhook-signature", strings.Repeat(forged+" ", 4)+valid)
	sigtest.WantReason(t, std.Verify(d.Req, body), signature.ErrInvalid)
}

func TestVerifyTwitchTolerance(t *testing.T) {
	twitch := sigtest.Cases()[0]
	for _, c := range sigtest.Cases() {
		if c.Scheme == "twitch" {
			twitch = c
		}
	}
	v := signature.NewTwitch([]string{twitch.Secrets[0]}, 0)
	// Twitch advises rejecting messages older than 10 minutes
	d := twitch.Delivery(t, twitch.Secrets[0], time.Now().Add(-9*time.Minute))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	d = twitch.Delivery(t, twitch.Secrets[0], time.Now().Add(-11*time.Minute))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)
	// the timestamp is RFC 3339, as signed: seconds are not accepted
	d = twitch.Delivery(t, twitch.Secrets[0], time.Now())
	d.Req.Header.Set("Twitch-Eventsub-Message-Timestamp", sigtest.Unix(time.Now()))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	// without the sha256= prefix the signature is not taken
	d = twitch.Delivery(t, twitch.Secrets[0], time.Now())
	d.Req.Header.Set("Twitch-Eventsub-Message-Signature", strings.TrimPrefix(d.Req.Header.Get("Twitch-Eventsub-Message-Signature"), "sha256="))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
}

func TestVerifyLinearTimestampIsOptional(t *testing.T) {
	body := []byte(`{"action":"create","webhookTimestamp":1676056940508}`)
	d := sigtest.NewDelivery("/", body, time.Time{})
	d.Req.Header.Set("Linear-Signature", sigtest.HMACHex("lin", string(body)))
	// without a tolerance the signed timestamp is not checked
	sigtest.WantReason(t, signature.NewLinear([]string{"lin"}, 0).Verify(d.Req, body), nil)
	sigtest.WantReason(t, signature.NewLinear([]string{"lin"}, time.Minute).Verify(d.Req, body), signature.ErrTimestamp)
	// with one, a body without webhookTimestamp fails
	noTS := []byte(`{"action":"create"}`)
	d.Req.Header.Set("Linear-Signature", sigtest.HMACHex("lin", string(noTS)))
	sigtest.WantReason(t, signature.NewLinear([]string{"lin"}, time.Minute).Verify(d.Req, noTS), signature.ErrTimestamp)
	// a forged body is invalid, whatever its timestamp
	now := []byte(`{"webhookTimestamp":` + strconv.FormatInt(time.Now().UnixMilli(), 10) + `}`)
	sigtest.WantReason(t, signature.NewLinear([]string{"lin"}, time.Minute).Verify(d.Req, now), signature.ErrInvalid)
}

func TestVerifyZoomMilliseconds(t *testing.T) {
	v := signature.NewZoom([]string{"zoom"}, 0)
	body := []byte(`{"event":"meeting.started"}`)
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	d := sigtest.NewDelivery("/", body, time.Time{})
	d.Req.Header.Set("x-zm-request-timestamp", ts)
	d.Req.Header.Set("x-zm-signature", "v0="+sigtest.HMACHex("zoom", "v0:", ts, ":", string(body)))
	sigtest.WantReason(t, v.Verify(d.Req, body), nil)
}

func TestParsePublicKeys(t *testing.T) {
	pub := sigtest.Ed25519Public("parse")
	der, _ := x509.MarshalPKIXPublicKey(pub)
	for name, s := range map[string]string{
		"hex":         hex.EncodeToString(pub),
		"HEX":         strings.ToUpper(hex.EncodeToString(pub)),
		"base64":      base64.StdEncoding.EncodeToString(pub),
		"raw base64":  base64.RawStdEncoding.EncodeToString(pub),
		"whpk_":       sigtest.WHPK(pub),
		"PEM":         sigtest.PEMPublic(pub),
		"DER base64":  base64.StdEncoding.EncodeToString(der),
		"wrapped PEM": "\n  " + sigtest.PEMPublic(pub) + "\n",
	} {
		k, err := signature.ParseEd25519PublicKey(s)
		if err != nil || !k.Equal(pub) {
			t.Errorf("ed25519 %s: %v", name, err)
		}
	}
	rsaPub := &sigtest.RSAKey("rsa-1").PublicKey
	pkix, _ := x509.MarshalPKIXPublicKey(rsaPub)
	pkcs1 := x509.MarshalPKCS1PublicKey(rsaPub)
	for name, s := range map[string]string{
		"PKIX PEM":      sigtest.PEMPublic(rsaPub),
		"PKCS1 PEM":     string(pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: pkcs1})),
		"certificate":   selfSigned(t, sigtest.RSAKey("rsa-1")),
		"base64 of PEM": base64.StdEncoding.EncodeToString([]byte(sigtest.PEMPublic(rsaPub))),
		"PKIX base64":   base64.StdEncoding.EncodeToString(pkix),
		"PKCS1 hex":     hex.EncodeToString(pkcs1),
		"wrapped":       wrap(base64.StdEncoding.EncodeToString(pkix), 64),
	} {
		k, err := signature.ParseRSAPublicKey(s)
		if err != nil || !k.Equal(rsaPub) {
			t.Errorf("rsa %s: %v", name, err)
		}
	}

	for _, c := range []struct {
		name, key, want string
		parse           func(string) error
	}{
		{"rsa key as ed25519", sigtest.PEMPublic(rsaPub), "RSA key", ed},
		{"ed25519 key as rsa", sigtest.PEMPublic(pub), "Ed25519 key", rs},
		{"garbage", "not a key!", "want PEM, base64 or hex", ed},
		{"decodes, but no key", "not a key", "want 32 bytes", ed},
		{"empty", " ", "empty", rs},
		{"broken PEM", "-----BEGIN PUBLIC KEY-----\nAAAA", "PEM block", rs},
		{"31 bytes", hex.EncodeToString(pub[:31]), "want 32 bytes", ed},
		{"short rsa", sigtest.PEMPublic(&rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 511), E: 65537}), "too short", rs},
	} {
		err := c.parse(c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func ed(s string) error { _, err := signature.ParseEd25519PublicKey(s); return err }
func rs(s string) error { _, err := signature.ParseRSAPublicKey(s); return err }

// wrap breaks s into lines of n characters, as key files often are.
func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	return b.String() + s
}

// selfSigned is a PEM certificate for key.
func selfSigned(t *testing.T, key *rsa.PrivateKey) string {
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhooks"}, NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func TestVerifyAsymmetricConstructorErrors(t *testing.T) {
	edKeys := []ed25519.PublicKey{sigtest.Ed25519Public("e")}
	rsaKeys := []*rsa.PublicKey{&sigtest.RSAKey("rsa-1").PublicKey}
	refused := func(name string) func(signature.Verifier, error) {
		return func(v signature.Verifier, err error) {
			t.Helper()
			if err == nil || v != nil {
				t.Errorf("%s: %v, %v", name, v, err)
			}
		}
	}
	refused("ed25519 without header")(signature.NewEd25519("", "", signature.Hex, edKeys))
	refused("ed25519 without keys")(signature.NewEd25519("X", "", signature.Hex, nil))
	refused("ed25519 with a short key")(signature.NewEd25519("X", "", signature.Hex, []ed25519.PublicKey{make([]byte, 31)}))
	refused("ed25519 with an unknown encoding")(signature.NewEd25519("X", "", 9, edKeys))
	refused("discord without keys")(signature.NewDiscord(nil, 0))
	refused("rsa without header")(signature.NewRSA("", "", crypto.SHA256, signature.PKCS1v15, signature.Base64, rsaKeys))
	refused("rsa with SHA-1")(signature.NewRSA("X", "", crypto.SHA1, signature.PKCS1v15, signature.Base64, rsaKeys))
	refused("rsa with an unknown padding")(signature.NewRSA("X", "", crypto.SHA256, 7, signature.Base64, rsaKeys))
	refused("rsa without keys")(signature.NewRSA("X", "", crypto.SHA256, signature.PSS, signature.Base64, nil))
	refused("rsa with a nil key")(signature.NewRSA("X", "", crypto.SHA256, signature.PSS, signature.Base64, []*rsa.PublicKey{nil}))
}

// TestVerifyAllocations holds every scheme to the allocations per verified
// delivery that BENCHMARKS.md reports: none, but for the schemes that
// parse the body (Twilio's form, Mercado Pago's data.id), RSA, whose
// arithmetic in crypto/rsa allocates, and JWT (golang-jwt decodes the
// token's JSON). make test runs it without the race detector.
func TestVerifyAllocations(t *testing.T) {
	if testkit.RaceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: make test measures allocations in a run without it")
	}
	most := map[string]float64{"twilio": 9, "mercadopago": 2, "woovi": 12, "rsa": 16, "evolution": 60, "jwt": 60}
	for _, c := range sigtest.Cases() {
		v, err := newScheme(c, 0, []string{c.Secrets[0]})
		if err != nil {
			t.Fatal(err)
		}
		c.Body = string(sigtest.BenchBody(c.Scheme))
		d := c.Delivery(t, c.Secrets[0], time.Now())
		if n := testing.AllocsPerRun(50, func() {
			if err := v.Verify(d.Req, d.Body); err != nil {
				t.Fatal(err)
			}
		}); n > most[c.Scheme] {
			t.Errorf("%s: %v allocations per verify, want at most %v", c.Label(), n, most[c.Scheme])
		}
	}
}

// BenchmarkVerifyWooviPublished verifies Woovi's published example with
// its published key: a 1024-bit RSA key, as Woovi signs in production
// (the woovi case of BenchmarkVerify uses a 2048-bit test key).
func BenchmarkVerifyWooviPublished(b *testing.B) {
	v, err := signature.NewWoovi(nil)
	if err != nil {
		b.Fatal(err)
	}
	d := sigtest.NewDelivery("/woovi", []byte(wooviPayload), time.Time{})
	d.Req.Header.Set("x-webhook-signature", wooviSignature)
	b.SetBytes(int64(len(d.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Verify(d.Req, d.Body); err != nil {
			b.Fatal(err)
		}
	}
}
