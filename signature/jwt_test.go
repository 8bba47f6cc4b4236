package signature_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Tokens made by jsonwebtoken 9.0.2, the library Evolution API signs with,
// with Evolution's WebhookController.generateJwtToken at a fixed clock:
// jwt.sign({iat: 1767225600, exp: 1767225600 + 600, app: "evolution",
// action: "webhook"}, key, {algorithm: "HS256"}). The first key is
// shorter than the 32 bytes some libraries demand of HS256 keys; Evolution
// takes whatever jwt_key the user sets.
const (
	evoIAT    = 1767225600
	evoKey1   = "evolution-jwt-key"
	evoToken1 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE3NjcyMjU2MDAsImV4cCI6MTc2NzIyNjIwMCwiYXBwIjoiZXZvbHV0aW9uIiwiYWN0aW9uIjoid2ViaG9vayJ9.StClv08Lmlb7aEMYnsp7Q0gskdZsDxjvB2SwYqKoel4"
	evoKey2   = "a second, longer evolution jwt_key value"
	evoToken2 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE3NjcyMjU2MDAsImV4cCI6MTc2NzIyNjIwMCwiYXBwIjoiZXZvbHV0aW9uIiwiYWN0aW9uIjoid2ViaG9vayJ9.vS-fYGOOxlCzgs27N44QbODfoHrgoeP3DRhO-WGiofk"
)

func bearer(token string) *sigtest.Delivery {
	d := sigtest.NewDelivery("/evolution", []byte(`{"event":"messages.upsert"}`), time.Time{})
	d.Req.Header.Set("Authorization", "Bearer "+token)
	return d
}

func TestJWTEvolutionVectors(t *testing.T) {
	at := func(t *testing.T, d time.Duration) { signature.SetClock(t, time.Unix(evoIAT, 0).Add(d)) }
	v, err := signature.NewJWT("", "", []string{evoKey1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(v signature.Verifier, token string, want *signature.Error) {
		t.Helper()
		d := bearer(token)
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
	}
	t.Run("valid", func(t *testing.T) {
		at(t, time.Second)
		check(v, evoToken1, nil)
	})
	t.Run("wrong secret", func(t *testing.T) {
		at(t, time.Second)
		check(v, evoToken2, signature.ErrInvalid)
	})
	t.Run("rotation", func(t *testing.T) {
		at(t, time.Second)
		both, _ := signature.NewJWT("Authorization", "", []string{evoKey2, evoKey1}, 0)
		check(both, evoToken1, nil)
		check(both, evoToken2, nil)
	})
	t.Run("expired within the leeway", func(t *testing.T) {
		at(t, 10*time.Minute+4*time.Minute)
		check(v, evoToken1, nil)
	})
	t.Run("expired beyond the leeway", func(t *testing.T) {
		at(t, 10*time.Minute+6*time.Minute)
		check(v, evoToken1, signature.ErrTimestamp)
		long, _ := signature.NewJWT("", "", []string{evoKey1}, 20*time.Minute)
		check(long, evoToken1, nil)
	})
	t.Run("issued in the future", func(t *testing.T) {
		at(t, -6*time.Minute)
		check(v, evoToken1, signature.ErrTimestamp)
	})
	t.Run("expired and forged is invalid, not stale", func(t *testing.T) {
		at(t, time.Hour)
		check(v, evoToken2, signature.ErrInvalid)
	})
	t.Run("bearer scheme in any case, other prefixes refused", func(t *testing.T) {
		at(t, time.Second)
		for _, h := range []string{"bearer " + evoToken1, "BEARER " + evoToken1} {
			d := bearer("")
			d.Req.Header.Set("Authorization", h)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
		}
		for _, h := range []string{evoToken1, "Basic " + evoToken1, "Bearer", "Bearer "} {
			d := bearer("")
			d.Req.Header.Set("Authorization", h)
			if err := v.Verify(d.Req, d.Body); err == nil {
				t.Errorf("%q accepted", h)
			}
		}
		d := bearer("")
		d.Req.Header.Del("Authorization")
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)
	})
}

func TestJWTRefusesOtherAlgorithms(t *testing.T) {
	signature.SetClock(t, time.Unix(evoIAT, 0))
	key := []byte(strings.Repeat("k", 64))
	v, _ := signature.NewJWT("", "", []string{string(key)}, 0)
	claims := []byte(`{"iat":1767225600,"exp":1767226200,"app":"evolution","action":"webhook"}`)
	for _, alg := range []jose.SignatureAlgorithm{jose.HS384, jose.HS512} {
		d := bearer(sigtest.StoneJWS(t, claims, alg, key, ""))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	}
	// alg none, with and without a signature
	payload := strings.Split(sigtest.StoneJWS(t, claims, jose.HS256, key, ""), ".")[1]
	for _, tok := range []string{
		"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + payload + ".",
		"eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + payload,
	} {
		d := bearer(tok)
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	}
	// RS256 with a key the verifier does not have
	d := bearer(sigtest.StoneJWS(t, claims, jose.RS256, sigtest.RSAKey("jwt-rsa"), ""))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	// the right algorithm and key, but no exp: a token valid for ever
	d = bearer(sigtest.StoneJWS(t, []byte(`{"iat":1767225600}`), jose.HS256, key, ""))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	// and with exp it passes
	d = bearer(sigtest.StoneJWS(t, claims, jose.HS256, key, ""))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
}

func TestJWTConstructorErrors(t *testing.T) {
	if _, err := signature.NewJWT("", "", nil, 0); err == nil {
		t.Error("no secret accepted")
	}
	if _, err := signature.NewJWT("", "", []string{""}, 0); err == nil {
		t.Error("empty secret accepted")
	}
}
