package signature_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// BenchmarkTemplate measures one valid delivery per family of the
// building blocks, with a 2 KB body (BenchmarkVerifyBaseline, one bare
// HMAC-SHA256 of the same body, is the floor): an HMAC template over a
// timestamp header and the body, and with the timestamp and the signature
// as parameters of one header (`t=…,v1=…`), the right one in the second of
// two sets (Persona rotating); Adyen's item fields in JSON; a token in
// each of ten items (Microsoft Graph's clientState); Ed25519,
// ECDSA P-256 and RSA-SHA256 templates; RSA with the key from a cached
// certificate (an SNS notification); and a JWT checked against a cached
// key set (Pub/Sub push).
func BenchmarkTemplate(b *testing.B) {
	body := sigtest.BenchBody("template")
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	msg := append([]byte(ts+"."), body...)

	run := benchVerify
	headerTemplate := func(b *testing.B, alg string, keys func(*signature.TemplateConfig), sig []byte) {
		cfg := signature.TemplateConfig{
			String: `{header.X-Timestamp}.{body}`, Algorithm: alg,
			Signature: signature.SignatureLocation{From: "header:X-Signature", Prefix: "v1="},
			Timestamp: signature.TimestampLocation{From: "header:X-Timestamp"},
		}
		keys(&cfg)
		v, err := signature.NewTemplate(cfg)
		if err != nil {
			b.Fatal(err)
		}
		enc := base64.StdEncoding.EncodeToString(sig)
		if strings.HasPrefix(alg, "hmac") {
			enc = hex.EncodeToString(sig)
		}
		d := sigtest.NewDelivery("/hooks", body, time.Time{})
		d.Req.Header.Set("X-Timestamp", ts)
		d.Req.Header.Set("X-Signature", "v1="+enc)
		run(b, v, d.Req, body)
	}

	b.Run("hmac-sha256", func(b *testing.B) {
		m := hmac.New(sha256.New, []byte("secret"))
		m.Write(msg)
		headerTemplate(b, signature.HMACSHA256, func(c *signature.TemplateConfig) { c.Secrets = []string{"secret"} }, m.Sum(nil))
	})
	// the same HMAC with the timestamp and the signature in one header,
	// `t=…,v1=…` (WorkOS, Mux), and in two sets of them (Persona rotating)
	params := func(b *testing.B, sets bool) {
		cfg := signature.TemplateConfig{
			String: `{timestamp}.{body}`, Algorithm: signature.HMACSHA256, Secrets: []string{"secret"},
			Signature: signature.SignatureLocation{From: "header:X-Signature", Separator: ",", Prefix: "v1="},
			Timestamp: signature.TimestampLocation{From: "header:X-Signature", Separator: ",", Prefix: "t="},
		}
		m := hmac.New(sha256.New, []byte("secret"))
		m.Write(msg)
		value := "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
		if sets {
			cfg.Signature.Sets = " "
			o := hmac.New(sha256.New, []byte("old"))
			o.Write(msg)
			value = "t=" + ts + ",v1=" + hex.EncodeToString(o.Sum(nil)) + " " + value
		}
		v, err := signature.NewTemplate(cfg)
		if err != nil {
			b.Fatal(err)
		}
		d := sigtest.NewDelivery("/hooks", body, time.Time{})
		d.Req.Header.Set("X-Signature", value)
		run(b, v, d.Req, body)
	}
	b.Run("hmac-sha256-parameters", func(b *testing.B) { params(b, false) })
	b.Run("hmac-sha256-second-set", func(b *testing.B) { params(b, true) })
	b.Run("hmac-sha256-adyen-item", func(b *testing.B) {
		cfg := adyenConfig
		cfg.Secrets = []string{adyenKey}
		v, err := signature.NewTemplate(cfg)
		if err != nil {
			b.Fatal(err)
		}
		d := sigtest.NewDelivery("/adyen", adyenBody(adyenItem(adyenSig)), time.Time{})
		run(b, v, d.Req, d.Body)
	})
	b.Run("token-graph-items", func(b *testing.B) {
		// Microsoft Graph: ten notifications, each clientState compared
		v, err := signature.NewTemplate(signature.TemplateConfig{Algorithm: signature.Token, Items: "json:value.#",
			Signature: signature.SignatureLocation{From: "json:clientState"}, Secrets: []string{"client-state-1"}})
		if err != nil {
			b.Fatal(err)
		}
		items := make([]string, 10)
		for i := range items {
			items[i] = `{"id":"n` + strconv.Itoa(i) + `","subscriptionId":"76619225-ff6b-4aa7-8b7a-a6bd2d5a8e8e","changeType":"created","resource":"Users/1/Messages/AAMkAGUw","clientState":"client-state-1"}`
		}
		d := sigtest.NewDelivery("/graph", []byte(`{"value":[`+strings.Join(items, ",")+`]}`), time.Time{})
		run(b, v, d.Req, d.Body)
	})
	b.Run("ed25519", func(b *testing.B) {
		key := sigtest.Ed25519Key("bench")
		headerTemplate(b, signature.Ed25519, func(c *signature.TemplateConfig) {
			c.PublicKeys = []string{sigtest.PEMPublic(key.Public())}
		}, ed25519.Sign(key, msg))
	})
	b.Run("ecdsa-p256-sha256", func(b *testing.B) {
		key := ecdsaKey("bench")
		d := sha256.Sum256(msg)
		sig, err := ecdsa.SignASN1(rand.Reader, key, d[:])
		if err != nil {
			b.Fatal(err)
		}
		headerTemplate(b, signature.ECDSAP256SHA256, func(c *signature.TemplateConfig) {
			c.PublicKeys = []string{sigtest.PEMPublic(&key.PublicKey)}
		}, sig)
	})
	b.Run("rsa-sha256", func(b *testing.B) {
		key := sigtest.RSAKey("bench")
		headerTemplate(b, signature.RSASHA256, func(c *signature.TemplateConfig) {
			c.PublicKeys = []string{sigtest.PEMPublic(&key.PublicKey)}
		}, sigtest.RSASign(key, crypto.SHA256, false, msg))
	})
	b.Run("rsa-sha256-cached-cert-sns", func(b *testing.B) {
		var vecs snsVectors
		loadJSON(b, "sns-validator-0.3.5.json", &vecs)
		srv := newCertServer(b, map[string][]byte{
			"/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem": []byte(vecs.SigningCert),
		})
		v, err := signature.NewTemplate(signature.TemplateConfig{
			String:          snsString,
			AlgorithmField:  "json:SignatureVersion",
			AlgorithmValues: map[string]string{"1": signature.RSASHA1, "2": signature.RSASHA256},
			Signature:       signature.SignatureLocation{From: "json:Signature"},
			CertURL: signature.CertURLConfig{
				From: "json:SigningCertURL", Hosts: []string{`127\.0\.0\.1`},
				Roots: pool(b, vecs.RootCA), HTTPClient: srv.Client(),
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		vec := vecs.Vectors[2] // SignatureVersion 2
		body := []byte(strings.Replace(vec.Body, snsCertURL, srv.URL+"/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem", 1))
		d := sigtest.NewDelivery("/sns", body, time.Time{})
		run(b, v, d.Req, body)
	})
	b.Run("jwt-rs256-cached-keyset", func(b *testing.B) {
		file := filepath.Join(b.TempDir(), "certs.json")
		writeFile(b, file, jwkSet(b, jwk{key: &sigtest.RSAKey("google-1").PublicKey, kid: "k1", alg: "RS256"}))
		ks, err := signature.NewKeySet(signature.KeySetConfig{File: file})
		if err != nil {
			b.Fatal(err)
		}
		defer ks.Close()
		v, err := signature.NewJWTVerifier(signature.JWTConfig{
			KeySet: ks, Audiences: []string{pushAudience},
			Issuers: []string{"https://accounts.google.com"},
			Claims:  map[string][]string{"email": {pushAccount}, "email_verified": {"true"}},
		})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		claims := jwt.MapClaims{"aud": pushAudience, "iss": "https://accounts.google.com", "email": pushAccount,
			"email_verified": true, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(sigtest.RSAKey("google-1"))
		if err != nil {
			b.Fatal(err)
		}
		d := sigtest.NewDelivery("/pubsub", body, time.Time{})
		d.Req.Header.Set("Authorization", "Bearer "+s)
		run(b, v, d.Req, body)
	})
}
