package signature_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The template signer's deliveries pass the template verifier (itself
// checked against signatures made with the standard library), for every
// algorithm, in a header and in the query, with the timestamp the signer
// sets in each unit; a delivery signed with another key does not.
func TestTemplateSignerRoundTrip(t *testing.T) {
	signature.SetClock(t, templateNow)
	privateKey := func(alg, name string) crypto.Signer {
		switch {
		case alg == signature.Ed25519:
			return sigtest.Ed25519Key(name)
		case alg == signature.ECDSAP256SHA256:
			return ecdsaKey(name)
		case strings.HasPrefix(alg, "rsa"):
			return sigtest.RSAKey(name)
		}
		return nil
	}
	for _, a := range templateAlgorithms {
		for _, loc := range []signature.SignatureLocation{
			{From: "header:X-Sig", Prefix: "sig=", Format: a.format},
			{From: "query:signature", Encoding: "hex", Format: a.format},
		} {
			for _, unit := range []string{"s", "ms", "rfc3339"} {
				t.Run(a.label()+"/"+loc.From+"/"+unit, func(t *testing.T) {
					cfg := signature.TemplateConfig{
						String:    `{method} {header.X-Ts} [{query.id} ]{json.event.id} {body}`,
						Algorithm: a.alg, Signature: loc,
						Timestamp: signature.TimestampLocation{From: "header:X-Ts", Unit: unit},
					}
					a.keys(&cfg, "right")
					v, err := signature.NewTemplate(cfg)
					if err != nil {
						t.Fatal(err)
					}
					for _, key := range []string{"right", "wrong"} {
						scfg := cfg
						if a.alg[:4] == "hmac" {
							scfg.Secrets = []string{"secret-" + key}
						}
						s, err := signature.NewTemplateSigner(scfg, privateKey(a.alg, key))
						if err != nil {
							t.Fatal(err)
						}
						d := sigtest.NewDelivery("/hooks?id=42", eventBody("evt_9", ""), time.Time{})
						body, err := s.Sign(d.Req, d.Body, templateNow)
						if err != nil {
							t.Fatal(err)
						}
						want := (*signature.Error)(nil)
						if key == "wrong" {
							want = signature.ErrInvalid
						}
						sigtest.WantReason(t, v.Verify(d.Req, body), want)
					}
				})
			}
		}
	}
}

func TestTemplateSignerErrors(t *testing.T) {
	base := signature.TemplateConfig{String: "{body}", Algorithm: signature.HMACSHA256, Secrets: []string{"s"},
		Signature: signature.SignatureLocation{From: "header:Sig"}}
	for name, c := range map[string]struct {
		edit func(*signature.TemplateConfig)
		key  crypto.Signer
	}{
		"a signature in the body the string signs": {func(c *signature.TemplateConfig) { c.Signature.From = "json:sig" }, nil},
		"items of a body the string signs":         {func(c *signature.TemplateConfig) { c.Signature.From, c.Items = "json:sig", "json:items.#" }, nil},
		"a key for a token": {func(c *signature.TemplateConfig) { c.String, c.Algorithm = "", signature.Token },
			ed25519.PrivateKey(sigtest.Ed25519Key("k"))},
		"a key for HMAC": {func(*signature.TemplateConfig) {}, ed25519.PrivateKey(sigtest.Ed25519Key("k"))},
		"no secret":      {func(c *signature.TemplateConfig) { c.Secrets = nil }, nil},
		"no key for RSA": {func(c *signature.TemplateConfig) { c.Algorithm, c.Secrets = signature.RSASHA256, nil }, nil},
		"an ECDSA key for RSA": {func(c *signature.TemplateConfig) { c.Algorithm, c.Secrets = signature.RSASHA256, nil },
			(*ecdsa.PrivateKey)(ecdsaKey("k"))},
	} {
		cfg := base
		c.edit(&cfg)
		if _, err := signature.NewTemplateSigner(cfg, c.key); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// NewJWTKeySigner's tokens pass golang-jwt's own check and the
// verifier's, RS256 and ES256.
func TestJWTKeySigner(t *testing.T) {
	signature.SetClock(t, jwtNow)
	file := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, file, jwkSet(t,
		jwk{key: &sigtest.RSAKey("issuer-rsa").PublicKey, kid: "r1"},
		jwk{key: &ecdsaKey("issuer-ec").PublicKey, kid: "e1"},
	))
	ks, err := signature.NewKeySet(signature.KeySetConfig{File: file, Algorithms: []string{"RS256", "ES256"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	v, err := signature.NewJWTVerifier(signature.JWTConfig{KeySet: ks, Audiences: []string{pushAudience}, Algorithms: []string{"RS256", "ES256"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg signature.JWTKeySignerConfig
		pub any
	}{
		{signature.JWTKeySignerConfig{Key: sigtest.RSAKey("issuer-rsa"), KeyID: "r1", Claims: map[string]any{"aud": pushAudience}}, &sigtest.RSAKey("issuer-rsa").PublicKey},
		{signature.JWTKeySignerConfig{Key: ecdsaKey("issuer-ec"), KeyID: "e1", Claims: map[string]any{"aud": pushAudience}}, &ecdsaKey("issuer-ec").PublicKey},
	} {
		s, err := signature.NewJWTKeySigner(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := sigtest.NewDelivery("/", []byte("{}"), time.Time{})
		if _, err := s.Sign(d.Req, d.Body, jwtNow); err != nil {
			t.Fatal(err)
		}
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
		raw := strings.TrimPrefix(d.Req.Header.Get("Authorization"), "Bearer ")
		parsed, err := jwt.NewParser(jwt.WithTimeFunc(func() time.Time { return jwtNow })).Parse(raw, func(*jwt.Token) (any, error) { return c.pub, nil })
		if err != nil || !parsed.Valid || parsed.Header["kid"] != c.cfg.KeyID {
			t.Fatalf("golang-jwt: %v", err)
		}
		// expired an hour later
		d2 := sigtest.NewDelivery("/", []byte("{}"), time.Time{})
		if _, err := s.Sign(d2.Req, d2.Body, jwtNow.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		sigtest.WantReason(t, v.Verify(d2.Req, d2.Body), signature.ErrTimestamp)
	}
	if _, err := signature.NewJWTKeySigner(signature.JWTKeySignerConfig{Key: sigtest.RSAKey("x"), Algorithm: "HS256"}); err == nil {
		t.Error("an HMAC algorithm with a private key accepted")
	}
}

// ParseECDSAPrivateKey reads SEC 1 and PKCS #8 PEM blocks and DER in hex
// or base64, P-256 only; ParseECDSAPublicKey reads what SendGrid shows
// (base64 DER) and PEM.
func TestParseECDSAKeys(t *testing.T) {
	key := ecdsaKey("parse")
	sec1, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})),
		hex.EncodeToString(sec1),
		base64.StdEncoding.EncodeToString(pkcs8),
	} {
		got, err := signature.ParseECDSAPrivateKey(s)
		if err != nil || !got.Equal(key) {
			t.Errorf("%.30q: %v", s, err)
		}
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der384, _ := x509.MarshalECPrivateKey(p384)
	rsaDER := x509.MarshalPKCS1PrivateKey(sigtest.RSAKey("parse"))
	for _, s := range []string{hex.EncodeToString(der384), hex.EncodeToString(rsaDER), "not a key"} {
		if _, err := signature.ParseECDSAPrivateKey(s); err == nil {
			t.Errorf("%.30q accepted", s)
		}
	}
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	for _, s := range []string{base64.StdEncoding.EncodeToString(pubDER), sigtest.PEMPublic(&key.PublicKey)} {
		if got, err := signature.ParseECDSAPublicKey(s); err != nil || !got.Equal(&key.PublicKey) {
			t.Errorf("%.30q: %v", s, err)
		}
	}
	for _, s := range []string{sigtest.PEMPublic(&p384.PublicKey), sigtest.PEMPublic(&sigtest.RSAKey("parse").PublicKey)} {
		if _, err := signature.ParseECDSAPublicKey(s); err == nil {
			t.Errorf("%.30q accepted", s)
		}
	}
}
