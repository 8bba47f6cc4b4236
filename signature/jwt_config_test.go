package signature_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Tokens here are made with golang-jwt directly, not with the package's
// signers, as Google makes Pub/Sub's push tokens (Google Cloud,
// "Authenticate push subscriptions": RS256, kid, aud the push endpoint,
// iss accounts.google.com, email and email_verified).

const (
	pushAudience = "https://hooks.example.com/pubsub"
	pushAccount  = "push@project.iam.gserviceaccount.com"
)

var jwtNow = time.Unix(1767225600, 0)

// pubsubClaims are the claims of a Pub/Sub push token at jwtNow, with
// changes (a nil value removes a claim).
func pubsubClaims(changes map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{
		"aud": pushAudience, "azp": "1234567890", "email": pushAccount, "email_verified": true,
		"iss": "https://accounts.google.com", "sub": "1234567890",
		"iat": jwtNow.Add(-time.Minute).Unix(), "exp": jwtNow.Add(59 * time.Minute).Unix(),
	}
	for k, v := range changes {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// googleToken signs claims as Google does, RS256 with kid, under the key
// a name stands for.
func googleToken(t *testing.T, key, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(sigtest.RSAKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pubsubKeySet is a key set file with Google's keys k1 and k2.
func pubsubKeySet(t *testing.T) *signature.KeySet {
	t.Helper()
	file := filepath.Join(t.TempDir(), "certs.json")
	writeFile(t, file, jwkSet(t,
		jwk{key: &sigtest.RSAKey("google-1").PublicKey, kid: "k1", alg: "RS256", use: "sig"},
		jwk{key: &sigtest.RSAKey("google-2").PublicKey, kid: "k2", alg: "RS256", use: "sig"},
	))
	ks, err := signature.NewKeySet(signature.KeySetConfig{File: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ks.Close)
	return ks
}

func pubsubVerifier(t *testing.T, ks *signature.KeySet) signature.Verifier {
	t.Helper()
	v, err := signature.NewJWTVerifier(signature.JWTConfig{
		KeySet:    ks,
		Issuers:   []string{"accounts.google.com", "https://accounts.google.com"},
		Audiences: []string{pushAudience},
		Claims:    map[string][]string{"email": {pushAccount}, "email_verified": {"true"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func bearerDelivery(value string) *sigtest.Delivery {
	d := sigtest.NewDelivery("/pubsub", []byte(`{"message":{"messageId":"1"}}`), time.Time{})
	if value != "" {
		d.Req.Header.Set("Authorization", value)
	}
	return d
}

func TestJWTVerifierPubSub(t *testing.T) {
	signature.SetClock(t, jwtNow)
	v := pubsubVerifier(t, pubsubKeySet(t))
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, pubsubClaims(nil))
	hs.Header["kid"] = "k1"
	// the algorithm confusion: HS256 keyed with the public key's PEM
	confused, err := hs.SignedString([]byte(sigtest.PEMPublic(&sigtest.RSAKey("google-1").PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, pubsubClaims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	es := jwt.NewWithClaims(jwt.SigningMethodES256, pubsubClaims(nil))
	es.Header["kid"] = "k1"
	esToken, err := es.SignedString(ecdsaKey("google-ec"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, header string
		want         *signature.Error
	}{
		{"valid", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(nil)), nil},
		{"the other key", "Bearer " + googleToken(t, "google-2", "k2", pubsubClaims(nil)), nil},
		{"scheme in another case", "bearer " + googleToken(t, "google-1", "k1", pubsubClaims(nil)), nil},
		{"the other issuer spelling", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"iss": "accounts.google.com"})), nil},
		{"audience in a list", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"aud": []string{"other", pushAudience}})), nil},
		{"no kid: every key tried", "Bearer " + googleToken(t, "google-2", "", pubsubClaims(nil)), nil},
		{"wrong audience", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"aud": "https://attacker.example.com"})), signature.ErrInvalid},
		{"no audience", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"aud": nil})), signature.ErrInvalid},
		{"wrong issuer", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"iss": "https://evil.example.com"})), signature.ErrInvalid},
		{"no issuer", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"iss": nil})), signature.ErrInvalid},
		{"wrong email", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"email": "other@project.iam.gserviceaccount.com"})), signature.ErrInvalid},
		{"email not verified", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"email_verified": false})), signature.ErrInvalid},
		{"no email", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"email": nil})), signature.ErrInvalid},
		{"expired", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"exp": jwtNow.Add(-signature.DefaultTolerance - time.Second).Unix()})), signature.ErrTimestamp},
		{"not yet valid", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"nbf": jwtNow.Add(time.Hour).Unix()})), signature.ErrTimestamp},
		{"no exp", "Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(map[string]any{"exp": nil})), signature.ErrInvalid},
		{"signed by another key under k1", "Bearer " + googleToken(t, "attacker", "k1", pubsubClaims(nil)), signature.ErrInvalid},
		{"an unknown kid", "Bearer " + googleToken(t, "google-1", "k9", pubsubClaims(nil)), signature.ErrInvalid},
		{"alg none", "Bearer " + none, signature.ErrInvalid},
		{"HS256 keyed with the public key", "Bearer " + confused, signature.ErrInvalid},
		{"ES256 when RS256 is expected", "Bearer " + esToken, signature.ErrInvalid},
		{"changed payload", "Bearer " + tamper(googleToken(t, "google-1", "k1", pubsubClaims(nil))), signature.ErrInvalid},
		{"another scheme", "Basic " + googleToken(t, "google-1", "k1", pubsubClaims(nil)), signature.ErrInvalid},
		{"no token", "", signature.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := bearerDelivery(c.header)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
		})
	}
}

// tamper changes one character of a token's payload.
func tamper(token string) string {
	parts := strings.Split(token, ".")
	p := []byte(parts[1])
	p[5] ^= 1
	parts[1] = string(p)
	return strings.Join(parts, ".")
}

// Until the key set loads, tokens are unavailable, not refused or passed.
func TestJWTVerifierUnavailableKeySet(t *testing.T) {
	signature.SetClock(t, jwtNow)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer srv.Close()
	ks, err := signature.NewKeySet(signature.KeySetConfig{URL: srv.URL, Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ks.Close()
	v := pubsubVerifier(t, ks)
	d := bearerDelivery("Bearer " + googleToken(t, "google-1", "k1", pubsubClaims(nil)))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrUnavailable)
}

// Secrets take HMAC algorithms only, key sets public-key ones only, and
// none is never accepted; a key set needs an audience.
func TestJWTVerifierConfigErrors(t *testing.T) {
	ks := pubsubKeySet(t)
	for _, c := range []struct {
		name, option string
		cfg          signature.JWTConfig
	}{
		{"none", "algorithms:", signature.JWTConfig{Secrets: []string{"s"}, Algorithms: []string{"none"}}},
		{"HS256 with a key set", "algorithms:", signature.JWTConfig{KeySet: ks, Audiences: []string{"a"}, Algorithms: []string{"HS256"}}},
		{"RS256 with secrets", "algorithms:", signature.JWTConfig{Secrets: []string{"s"}, Algorithms: []string{"RS256"}}},
		{"unknown", "algorithms:", signature.JWTConfig{Secrets: []string{"s"}, Algorithms: []string{"HS1"}}},
		{"a key set without audience", "audience:", signature.JWTConfig{KeySet: ks}},
		{"both", "secret:", signature.JWTConfig{KeySet: ks, Secrets: []string{"s"}, Audiences: []string{"a"}}},
		{"neither", "secret:", signature.JWTConfig{}},
		{"an empty secret", "secret 1:", signature.JWTConfig{Secrets: []string{""}}},
		{"a claim without value", "claim", signature.JWTConfig{Secrets: []string{"s"}, Claims: map[string][]string{"email": nil}}},
		{"a bad scheme", "scheme:", signature.JWTConfig{Secrets: []string{"s"}, Scheme: "Bear er"}},
		{"negative leeway", "leeway:", signature.JWTConfig{Secrets: []string{"s"}, Leeway: -time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := signature.NewJWTVerifier(c.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), c.option) {
				t.Fatalf("error %q does not start with %q", err, c.option)
			}
		})
	}
}

// With secrets, the general verifier checks HS256 tokens in a header of
// its own, with issuer and claims.
func TestJWTVerifierSecrets(t *testing.T) {
	signature.SetClock(t, jwtNow)
	v, err := signature.NewJWTVerifier(signature.JWTConfig{
		Header: "X-Webhook-Token", Secrets: []string{"old", "new"}, Algorithms: []string{"HS256", "HS512"},
		Issuers: []string{"billing"}, Claims: map[string][]string{"scope": {"webhooks", "admin"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	token := func(m jwt.SigningMethod, key string, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := func(iss string, scope any) jwt.MapClaims {
		return jwt.MapClaims{"iss": iss, "scope": scope, "exp": jwtNow.Add(time.Minute).Unix()}
	}
	for _, c := range []struct {
		name, token string
		want        *signature.Error
	}{
		{"HS256 under the new secret", token(jwt.SigningMethodHS256, "new", claims("billing", "webhooks")), nil},
		{"HS512 under the old secret", token(jwt.SigningMethodHS512, "old", claims("billing", []string{"read", "admin"})), nil},
		{"HS384 not allowed", token(jwt.SigningMethodHS384, "new", claims("billing", "webhooks")), signature.ErrInvalid},
		{"wrong secret", token(jwt.SigningMethodHS256, "other", claims("billing", "webhooks")), signature.ErrInvalid},
		{"wrong issuer", token(jwt.SigningMethodHS256, "new", claims("shipping", "webhooks")), signature.ErrInvalid},
		{"wrong claim", token(jwt.SigningMethodHS256, "new", claims("billing", "read")), signature.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := sigtest.NewDelivery("/", []byte("{}"), time.Time{})
			d.Req.Header.Set("X-Webhook-Token", c.token)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
		})
	}
}
