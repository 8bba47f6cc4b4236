package signature_test

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// stoneKeys is a loaded key set, or none.
type stoneKeys map[string]*rsa.PublicKey

func (k stoneKeys) Loaded() bool { return k != nil }

func (k stoneKeys) StoneKey(kid string) (*rsa.PublicKey, error) {
	if k == nil {
		return nil, signature.ErrUnavailable
	}
	if pub, ok := k[kid]; ok {
		return pub, nil
	}
	return nil, signature.ErrInvalid
}

func stoneFixture(t *testing.T) (partner, stone *rsa.PrivateKey, v signature.Opener) {
	partner = sigtest.RSAKey("stone-partner")
	stone = sigtest.RSAKey("stone-signer")
	v, err := signature.NewStone(partner, stoneKeys{"stone-2024": &stone.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	return partner, stone, v
}

func TestStoneOpen(t *testing.T) {
	partner, stone, v := stoneFixture(t)
	event := []byte(sigtest.StoneEvent)
	open := func(body []byte) ([]byte, error) {
		return v.Open(httptest.NewRequest("POST", "/stone", nil), body)
	}

	t.Run("valid", func(t *testing.T) {
		got, err := open(sigtest.StoneDelivery(t, event, stone, "stone-2024", &partner.PublicKey))
		sigtest.WantReason(t, err, nil)
		if string(got) != string(event) {
			t.Fatalf("payload %s", got)
		}
		sigtest.WantReason(t, v.Verify(httptest.NewRequest("POST", "/", nil), sigtest.StoneDelivery(t, event, stone, "stone-2024", &partner.PublicKey)), nil)
	})
	t.Run("signed by another key under a known kid", func(t *testing.T) {
		other := sigtest.RSAKey("stone-forger")
		_, err := open(sigtest.StoneDelivery(t, event, other, "stone-2024", &partner.PublicKey))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("unknown kid", func(t *testing.T) {
		_, err := open(sigtest.StoneDelivery(t, event, stone, "stone-2099", &partner.PublicKey))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("no kid", func(t *testing.T) {
		_, err := open(sigtest.StoneDelivery(t, event, stone, "", &partner.PublicKey))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("encrypted to another partner", func(t *testing.T) {
		other := sigtest.RSAKey("stone-forger")
		_, err := open(sigtest.StoneDelivery(t, event, stone, "stone-2024", &other.PublicKey))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("tampered ciphertext", func(t *testing.T) {
		jwe := sigtest.StoneJWE(t, sigtest.StoneJWS(t, event, jose.RS256, stone, "stone-2024"), jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey)
		parts := strings.Split(jwe, ".")
		c := []byte(parts[3])
		c[len(c)/2] ^= 'A' ^ 'B'
		if c[len(c)/2] == parts[3][len(c)/2] {
			c[len(c)/2] = 'Q'
		}
		parts[3] = string(c)
		_, err := open(sigtest.StoneBody(strings.Join(parts, ".")))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("tampered signed payload", func(t *testing.T) {
		jws := sigtest.StoneJWS(t, event, jose.RS256, stone, "stone-2024")
		parts := strings.Split(jws, ".")
		forged := sigtest.StoneJWS(t, []byte(`{"event_type":"cash_in_internal_transfer","target_data":{"amount":1000000}}`), jose.RS256, sigtest.RSAKey("stone-forger"), "stone-2024")
		parts[1] = strings.Split(forged, ".")[1]
		_, err := open(sigtest.StoneBody(sigtest.StoneJWE(t, strings.Join(parts, "."), jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey)))
		sigtest.WantReason(t, err, signature.ErrInvalid)
	})
	t.Run("unencrypted body", func(t *testing.T) {
		_, err := open(event)
		sigtest.WantReason(t, err, signature.ErrMissing)
		_, err = open([]byte(`{"encrypted_body":""}`))
		sigtest.WantReason(t, err, signature.ErrMissing)
		_, err = open([]byte(`{"encrypted_body":42}`))
		sigtest.WantReason(t, err, signature.ErrMissing)
		// the plain JWS, not encrypted
		_, err = open(sigtest.StoneBody(sigtest.StoneJWS(t, event, jose.RS256, stone, "stone-2024")))
		sigtest.WantReason(t, err, signature.ErrInvalid)
		for _, b := range []string{``, `[]`, `"x"`, `{"encrypted_body":"a.b.c.d.e"`} {
			if _, err := open([]byte(b)); err == nil {
				t.Fatalf("%q accepted", b)
			}
		}
	})
	t.Run("two encrypted_body members", func(t *testing.T) {
		// the first verifies; a reader that keeps the last member would
		// decrypt the second, which anyone can encrypt to the partner
		genuine := sigtest.StoneDelivery(t, event, stone, "stone-2024", &partner.PublicKey)
		other := sigtest.StoneJWE(t, "anything", jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey)
		for _, second := range []string{`"encrypted_body"`, `"Encrypted_Body"`, `"encrypted\u005fbody"`} {
			body := append(bytes.TrimSuffix(genuine, []byte("}")), []byte(`,`+second+`:"`+other+`"}`)...)
			_, err := open(body)
			sigtest.WantReason(t, err, signature.ErrAmbiguous)
		}
		// a member the scheme does not read may repeat
		body := append(bytes.TrimSuffix(genuine, []byte("}")), []byte(`,"x":1,"x":2}`)...)
		got, err := open(body)
		sigtest.WantReason(t, err, nil)
		if string(got) != string(event) {
			t.Fatalf("payload %s", got)
		}
	})
	t.Run("JWS header parameters", func(t *testing.T) {
		for name, header := range map[string]string{
			"critical":      `{"alg":"RS256","kid":"stone-2024","crit":["exp"],"exp":1}`,
			"alg twice":     `{"alg":"HS256","kid":"stone-2024","alg":"RS256"}`,
			"kid twice":     `{"alg":"RS256","kid":"stone-2024","kid":"other"}`,
			"kid not text":  `{"alg":"RS256","kid":7}`,
			"not an object": `["RS256"]`,
		} {
			jws := signJWS(t, header, event, stone)
			_, err := open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey)))
			if err != signature.ErrInvalid {
				t.Errorf("%s: %v, want invalid", name, err)
			}
		}
		// the same, well formed, passes
		jws := signJWS(t, `{"alg":"RS256","kid":"stone-2024","typ":"JWT"}`, event, stone)
		got, err := open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey)))
		sigtest.WantReason(t, err, nil)
		if string(got) != string(event) {
			t.Fatalf("payload %s", got)
		}
	})
	t.Run("no key set loaded", func(t *testing.T) {
		none, err := signature.NewStone(partner, stoneKeys(nil))
		if err != nil {
			t.Fatal(err)
		}
		_, err = none.Open(httptest.NewRequest("POST", "/", nil), sigtest.StoneDelivery(t, event, stone, "stone-2024", &partner.PublicKey))
		sigtest.WantReason(t, err, signature.ErrUnavailable)
		// an unencrypted body is still refused as such
		_, err = none.Open(httptest.NewRequest("POST", "/", nil), event)
		sigtest.WantReason(t, err, signature.ErrMissing)
	})
}

// Downgrades: every JWE and JWS algorithm but Stone's is refused. The
// JWE's alg and enc are checked in its protected header, before the
// private key is used.
func TestStoneAlgorithmDowngrades(t *testing.T) {
	partner, stone, v := stoneFixture(t)
	event := []byte(sigtest.StoneEvent)
	jws := sigtest.StoneJWS(t, event, jose.RS256, stone, "stone-2024")
	open := func(body []byte) error {
		_, err := v.Open(httptest.NewRequest("POST", "/stone", nil), body)
		return err
	}
	t.Run("JWE RSA1_5", func(t *testing.T) {
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.RSA1_5, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
	})
	t.Run("JWE RSA-OAEP (SHA-1)", func(t *testing.T) {
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.RSA_OAEP, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
	})
	t.Run("JWE A128CBC-HS256", func(t *testing.T) {
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.RSA_OAEP_256, jose.A128CBC_HS256, &partner.PublicKey))), signature.ErrInvalid)
	})
	t.Run("JWE dir with a guessed key", func(t *testing.T) {
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, jws, jose.DIRECT, jose.A256GCM, make([]byte, 32)))), signature.ErrInvalid)
	})
	t.Run("JWE compressed", func(t *testing.T) {
		enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.RSA_OAEP_256, Key: &partner.PublicKey}, &jose.EncrypterOptions{Compression: jose.DEFLATE})
		if err != nil {
			t.Fatal(err)
		}
		obj, err := enc.Encrypt([]byte(jws))
		if err != nil {
			t.Fatal(err)
		}
		compact, _ := obj.CompactSerialize()
		sigtest.WantReason(t, open(sigtest.StoneBody(compact)), signature.ErrInvalid)
	})
	t.Run("JWS HS256 keyed with Stone's public key", func(t *testing.T) {
		// the classic confusion: an HMAC keyed with the public key's bytes
		pubDER := stone.PublicKey.N.Bytes()
		forged := sigtest.StoneJWS(t, event, jose.HS256, pubDER, "stone-2024")
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, forged, jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
	})
	t.Run("JWS none", func(t *testing.T) {
		none := "eyJhbGciOiJub25lIiwia2lkIjoic3RvbmUtMjAyNCJ9." + strings.Split(jws, ".")[1] + "."
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, none, jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
	})
	t.Run("JWS PS256 and RS512", func(t *testing.T) {
		for _, alg := range []jose.SignatureAlgorithm{jose.PS256, jose.RS512} {
			other := sigtest.StoneJWS(t, event, alg, stone, "stone-2024")
			sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, other, jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
		}
	})
	t.Run("JWS in JSON serialization", func(t *testing.T) {
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: stone}, (&jose.SignerOptions{}).WithHeader("kid", "stone-2024"))
		obj, _ := signer.Sign(event)
		sigtest.WantReason(t, open(sigtest.StoneBody(sigtest.StoneJWE(t, obj.FullSerialize(), jose.RSA_OAEP_256, jose.A256GCM, &partner.PublicKey))), signature.ErrInvalid)
	})
}

// signJWS signs payload under a protected header written out, RS256 as
// Stone signs, so a test can give the header any shape.
func signJWS(t *testing.T, header string, payload []byte, key *rsa.PrivateKey) string {
	t.Helper()
	enc := base64.RawURLEncoding
	input := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(payload)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + enc.EncodeToString(sig)
}

// A delivery costs little memory beyond its body, forged or genuine: the
// envelope and the JWE are read where they are, the ciphertext decrypted
// in place, and the payload decoded only once its signature holds (it
// cost 7 times the body's size with go-jose).
func TestStoneOpenMemory(t *testing.T) {
	partner, stone, v := stoneFixture(t)
	event := []byte(`{"id":"evt","pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	for _, c := range []struct {
		name string
		by   *rsa.PrivateKey
		want *signature.Error
		most float64 // allocated bytes per body byte
	}{
		{"genuine", stone, nil, 1.5},
		{"forged", sigtest.RSAKey("stone-forger"), signature.ErrInvalid, 0.9},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := sigtest.StoneDelivery(t, event, c.by, "stone-2024", &partner.PublicKey)
			r := httptest.NewRequest("POST", "/stone", nil)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := v.Open(r, body)
			runtime.ReadMemStats(&after)
			sigtest.WantReason(t, err, c.want)
			if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body)); per > c.most {
				t.Fatalf("opening a %d-byte delivery allocated %.2f bytes per body byte, want at most %.2f", len(body), per, c.most)
			}
		})
	}
}

func TestStoneConstructorErrors(t *testing.T) {
	partner := sigtest.RSAKey("stone-partner")
	if _, err := signature.NewStone(nil, stoneKeys{}); err == nil {
		t.Error("no private key accepted")
	}
	if _, err := signature.NewStone(partner, nil); err == nil {
		t.Error("no key set accepted")
	}
}
