package signature_test

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// newSigner builds, with this package's constructors, the signer of c's
// scheme and options for secret (for a public-key scheme, the private key
// the secret names).
func newSigner(t *testing.T, c sigtest.Case, secret string) signature.Signer {
	t.Helper()
	var s signature.Signer
	var err error
	h := map[string]crypto.Hash{"": crypto.SHA256, "sha1": crypto.SHA1, "sha256": crypto.SHA256, "sha512": crypto.SHA512}[c.Algorithm]
	switch c.Scheme {
	case "stripe":
		s = signature.NewStripeSigner(secret)
	case "paddle":
		s = signature.NewPaddleSigner(secret)
	case "slack":
		s = signature.NewSlackSigner(secret)
	case "zoom":
		s = signature.NewZoomSigner(secret)
	case "standard", "svix":
		prefix := map[string]string{"standard": "webhook-", "svix": "svix-"}[c.Scheme]
		if c.Public != nil {
			s = signature.NewStandardWebhooksEd25519Signer(prefix, sigtest.Ed25519Key(secret))
		} else {
			s, err = signature.NewStandardWebhooksSigner(prefix, secret)
		}
	case "github", "whatsapp":
		s, err = signature.NewHMACSigner("X-Hub-Signature-256", "sha256=", crypto.SHA256, signature.Hex, secret)
	case "ifood":
		s, err = signature.NewHMACSigner("X-IFood-Signature", "", crypto.SHA256, signature.Hex, secret)
	case "razorpay":
		s, err = signature.NewHMACSigner("X-Razorpay-Signature", "", crypto.SHA256, signature.Hex, secret)
	case "hmac":
		s, err = signature.NewHMACSigner(c.Header, c.Prefix, h, encoding(c.Encoding, signature.Hex), secret)
	case "shopify":
		s = signature.NewShopifySigner(secret)
	case "linear":
		s = signature.NewLinearSigner(secret)
	case "twitch":
		s = signature.NewTwitchSigner(secret)
	case "mercadopago":
		s = signature.NewMercadoPagoSigner(secret)
	case "pagbank":
		s = signature.NewPagBankSigner(secret)
	case "twilio":
		s = signature.NewTwilioSigner(secret, c.URL)
	case "square":
		s = signature.NewSquareSigner(secret, c.URL)
	case "hubspot":
		s = signature.NewHubSpotSigner(secret, c.URL)
	case "gitlab":
		s, err = signature.NewGitLabSigner(secret)
	case "asaas":
		s, err = signature.NewTokenSigner("asaas-access-token", "", secret)
	case "token":
		s, err = signature.NewTokenSigner(c.Header, c.Prefix, secret)
	case "evolution", "jwt":
		if c.Header != "" && c.Scheme == "evolution" {
			s, err = signature.NewTokenSigner(c.Header, c.Prefix, secret)
		} else {
			s, err = signature.NewJWTSigner(c.Header, c.Prefix, secret, map[string]any{"app": "evolution", "action": "webhook"})
		}
	case "discord":
		s = signature.NewDiscordSigner(sigtest.Ed25519Key(secret))
	case "ed25519":
		s = signature.NewEd25519Signer(c.Header, c.Prefix, encoding(c.Encoding, signature.Hex), sigtest.Ed25519Key(secret))
	case "woovi":
		s = signature.NewWooviSigner(sigtest.RSAKey(secret))
	case "rsa":
		padding := signature.PKCS1v15
		if c.Padding == "pss" {
			padding = signature.PSS
		}
		s, err = signature.NewRSASigner(c.Header, c.Prefix, h, padding, encoding(c.Encoding, signature.Base64), sigtest.RSAKey(secret))
	default:
		t.Fatalf("no signer for scheme %s", c.Scheme)
	}
	if err != nil {
		t.Fatalf("%s: %v", c.Label(), err)
	}
	return s
}

// signed returns c's delivery at a time signed by this package's signer,
// with the ids sigtest's helper sets given first (they are signed).
func signed(t *testing.T, c sigtest.Case, secret string, at time.Time, ids http.Header) (*http.Request, []byte) {
	t.Helper()
	target := c.Target
	if target == "" {
		target = "/hook"
	}
	r := httptest.NewRequest(http.MethodPost, target, nil)
	for name, v := range ids {
		r.Header[name] = v
	}
	body, err := newSigner(t, c, secret).Sign(r, []byte(c.Body), at)
	if err != nil {
		t.Fatalf("%s: sign: %v", c.Label(), err)
	}
	return r, body
}

// signedIDs are the headers of sigtest's delivery that carry ids the
// signature covers, which a signer takes as given.
var signedIDs = []string{"Webhook-Id", "Svix-Id", "Twitch-Eventsub-Message-Id", "X-Request-Id"}

// TestSignersPassTheirVerifiers: for every preset and generic scheme, a
// delivery this package signs passes the scheme's verifier, under the
// secret (or key) it was signed with and not another; and where the
// signature is deterministic, it is byte for byte the one sigtest's
// helpers make, which follow each provider's documentation without this
// package's code (and are checked by the providers' own libraries).
func TestSignersPassTheirVerifiers(t *testing.T) {
	// randomized signatures (RSA-PSS, JWT claims, a v1a list sigtest pads),
	// or another algorithm than the signer's (Twilio's SharedKey in
	// SHA-256, Shopify's Events headers): verified, not compared
	notCompared := map[string]bool{"rsa": true, "jwt": true, "evolution": true, "standard v1a": true, "twilio sha256": true, "shopify events": true}
	for _, c := range sigtest.Cases() {
		t.Run(c.Label(), func(t *testing.T) {
			good, wrong := c.Secrets[0], c.Secrets[2]
			v, err := newScheme(c, 0, []string{good})
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now().Truncate(time.Second)
			want := c.Delivery(t, good, at)
			ids := http.Header{}
			for _, name := range signedIDs {
				if v := want.Req.Header.Values(name); len(v) > 0 {
					ids[name] = v
				}
			}
			r, body := signed(t, c, good, at, ids)
			sigtest.WantReason(t, v.Verify(r, body), nil)

			r, body = signed(t, c, wrong, at, ids)
			sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)

			if notCompared[c.Label()] || notCompared[c.Scheme] && c.Header == "" {
				return
			}
			r, body = signed(t, c, good, at, ids)
			if !bytes.Equal(body, want.Body) {
				t.Fatalf("body %s, sigtest's %s", body, want.Body)
			}
			for _, h := range c.Headers {
				if got, theirs := r.Header.Get(h), want.Req.Header.Get(h); got == "" || !strings.Contains(theirs, got) {
					t.Errorf("%s: %q, sigtest's %q", h, got, theirs)
				}
			}
		})
	}
}

// TestSignersMakeUpMissingIDs: a scheme that signs an id gets one made up
// when the request has none, and the delivery verifies.
func TestSignersMakeUpMissingIDs(t *testing.T) {
	for _, c := range sigtest.Cases() {
		if c.Scheme != "standard" && c.Scheme != "svix" && c.Scheme != "twitch" && c.Scheme != "mercadopago" || c.Public != nil {
			continue
		}
		t.Run(c.Label(), func(t *testing.T) {
			v, err := newScheme(c, 0, []string{c.Secrets[0]})
			if err != nil {
				t.Fatal(err)
			}
			r, body := signed(t, c, c.Secrets[0], time.Now(), nil)
			sigtest.WantReason(t, v.Verify(r, body), nil)
			r2, _ := signed(t, c, c.Secrets[0], time.Now(), nil)
			for _, name := range signedIDs {
				if id := r.Header.Get(name); id != "" && id == r2.Header.Get(name) {
					t.Fatalf("%s: two deliveries got the same made-up id %q", name, id)
				}
			}
		})
	}
}

// TestTwilioSignerJSONBody: a JSON body is signed through bodySHA256, as
// Twilio signs it, and verifies.
func TestTwilioSignerJSONBody(t *testing.T) {
	v := signature.NewTwilio([]string{"tok"}, func(dst []byte, r *http.Request) []byte {
		return append(dst, "https://hooks.example.com/sms?"+r.URL.RawQuery...)
	})
	r := httptest.NewRequest(http.MethodPost, "/sms?tenant=7", nil)
	r.Header.Set("Content-Type", "application/json")
	body, err := signature.NewTwilioSigner("tok", "https://hooks.example.com/sms").Sign(r, []byte(`{"id":"x"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.URL.RawQuery, "bodySHA256=") || !strings.Contains(r.URL.RawQuery, "tenant=7") {
		t.Fatalf("query %q", r.URL.RawQuery)
	}
	sigtest.WantReason(t, v.Verify(r, body), nil)
	sigtest.WantReason(t, v.Verify(r, []byte(`{"id":"y"}`)), signature.ErrInvalid)
}

// TestLinearSignerSetsTimestamp: Linear's signer sets webhookTimestamp in
// a body that has none, and replaces a stale one; a timestamp-checking
// verifier accepts both.
func TestLinearSignerSetsTimestamp(t *testing.T) {
	v := signature.NewLinear([]string{"lin"}, time.Minute)
	for _, in := range []string{`{"id":"a"}`, `{}`, `{"webhookTimestamp":1,"id":"b"}`, ` { "id" : "c" } `} {
		r := httptest.NewRequest(http.MethodPost, "/linear", nil)
		body, err := signature.NewLinearSigner("lin").Sign(r, []byte(in), time.Now())
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !json.Valid(body) {
			t.Fatalf("%s became %s", in, body)
		}
		sigtest.WantReason(t, v.Verify(r, body), nil)
	}
	if _, err := signature.NewLinearSigner("lin").Sign(httptest.NewRequest(http.MethodPost, "/", nil), []byte("a=b"), time.Now()); err == nil {
		t.Fatal("a form body signed for Linear")
	}
}

// TestStoneSigner: a delivery sealed for Stone's scheme opens with the
// partner's private key and the key set StoneKeySet writes, and not
// under another kid.
func TestStoneSigner(t *testing.T) {
	signing, partner := sigtest.RSAKey("stone-signing"), sigtest.RSAKey("stone-partner")
	s, err := signature.NewStoneSigner(signing, "kid-1", &partner.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/stone", nil)
	body, err := s.Sign(r, []byte(sigtest.StoneEvent), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	set, err := signature.StoneKeySet(signing, "kid-1")
	if err != nil {
		t.Fatal(err)
	}
	var published struct {
		Keys []struct {
			Kid string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(set, &published); err != nil || len(published.Keys) != 1 || published.Keys[0].Kid != "kid-1" || published.Keys[0].Use != "sig" || published.Keys[0].Alg != "RS256" {
		t.Fatalf("key set %s: %v", set, err)
	}
	v, err := signature.NewStone(partner, stoneKeys{"kid-1": &signing.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Open(r, body)
	if err != nil || string(got) != sigtest.StoneEvent {
		t.Fatalf("open: %q, %v", got, err)
	}
	other, _ := signature.NewStone(partner, stoneKeys{"kid-2": &signing.PublicKey})
	sigtest.WantReason(t, other.Verify(r, body), signature.ErrInvalid)
}

// TestParsePrivateKeys: the private keys the send command takes, in the
// forms the public keys are accepted in.
func TestParsePrivateKeys(t *testing.T) {
	_, ek, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(ek)
	for _, form := range []string{
		hex.EncodeToString(ek.Seed()),
		hex.EncodeToString(ek),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
	} {
		k, err := signature.ParseEd25519PrivateKey(form)
		if err != nil || !k.Equal(ek) {
			t.Errorf("%.20s…: %v", form, err)
		}
	}
	rk := sigtest.RSAKey("parse")
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rk)
	for _, form := range []string{
		string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})),
	} {
		k, err := signature.ParseRSAPrivateKey(form)
		if err != nil || !k.Equal(rk) {
			t.Errorf("%.30s…: %v", form, err)
		}
	}
	if _, err := signature.ParseRSAPrivateKey(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))); err == nil {
		t.Error("an Ed25519 key parsed as RSA")
	}
	if _, err := signature.ParseRSAPrivateKey("not a key"); err == nil {
		t.Error("garbage parsed as an RSA key")
	}
}
