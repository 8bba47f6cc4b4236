package providers

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/api/idtoken"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

const (
	pubsubAudience = "https://hooks.example.com/pubsub"
	pubsubAccount  = "push@acme-prod.iam.gserviceaccount.com"
)

// pubsubToken is a token shaped as Google's for Pub/Sub push
// ("Authenticate push subscriptions": its header and claims), with the
// claims changed as given, signed with key under kid.
func pubsubToken(t testing.TB, key *rsa.PrivateKey, kid string, edit func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"aud": pubsubAudience, "azp": "113774264463038321964", "email": pubsubAccount, "email_verified": true,
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "iss": "https://accounts.google.com", "sub": "113774264463038321964",
	}
	if edit != nil {
		edit(claims)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The pubsub preset with Google's certificates (at their URL, served here
// by a stand-in for Google's host) takes the tokens Google's own library
// (google.golang.org/api/idtoken) takes, and refuses besides what Google
// tells receivers to check and that library does not: the issuer, the
// service account and whether its email is verified.
// pubsubKid names Google's key in the key set the tests serve.
const pubsubKid = "7d680d8c70d44e947133cbd499ebc1a61c3d5abc"

// pubsubBody is a push delivery's body ("Receive messages using push").
var pubsubBody = []byte(`{"message":{"data":"SGVsbG8=","messageId":"2070443601311540","message_id":"2070443601311540","publishTime":"2021-02-26T19:13:55.749Z"},"subscription":"projects/acme-prod/subscriptions/orders-push"}`)

// pubsubRoute provisions the pubsub preset for pubsubAudience and
// pubsubAccount, with Google's key set (key under pubsubKid) served by a
// stand-in for Google's host.
func pubsubRoute(t testing.TB, key *rsa.PrivateKey) (*Verification, *testkit.Hosts) {
	t.Helper()
	hosts := providerHosts(t, "www.googleapis.com")
	hosts.Serve("/oauth2/v3/certs", string(sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{pubsubKid: key})))
	ctx, cancel := testkit.NewContext(t)
	t.Cleanup(cancel)
	ver, err := Provision(ctx, VerifyConfig{Scheme: "pubsub", Audiences: []string{pubsubAudience}, Claims: map[string][]string{"email": {pubsubAccount}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ver.Release)
	return ver, hosts
}

func TestPubSub(t *testing.T) {
	key, other := sigtest.RSAKey("google"), sigtest.RSAKey("not google")
	ver, hosts := pubsubRoute(t, key)
	oracle, err := idtoken.NewValidator(context.Background(), idtoken.WithHTTPClient(hosts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	body := pubsubBody
	const kid = pubsubKid
	for _, c := range []struct {
		name     string
		token    string
		google   bool // idtoken.Validate takes it
		want     *signature.Error
		scheme   string
		noBearer bool
	}{
		{name: "Google's shape", token: pubsubToken(t, key, kid, nil), google: true},
		{name: "the issuer without https", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { c["iss"] = "accounts.google.com" }), google: true},
		{name: "another audience", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { c["aud"] = "https://attacker.example/pubsub" }), want: signature.ErrInvalid},
		{name: "another issuer", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { c["iss"] = "https://attacker.example" }), google: true, want: signature.ErrInvalid},
		{name: "another service account", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { c["email"] = "someone@other.iam.gserviceaccount.com" }), google: true, want: signature.ErrInvalid},
		{name: "an unverified email", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { c["email_verified"] = false }), google: true, want: signature.ErrInvalid},
		{name: "no email", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) { delete(c, "email") }), google: true, want: signature.ErrInvalid},
		{name: "expired", token: pubsubToken(t, key, kid, func(c jwt.MapClaims) {
			c["exp"], c["iat"] = time.Now().Add(-time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix()
		}), want: signature.ErrTimestamp},
		{name: "signed with another key", token: pubsubToken(t, other, kid, nil), want: signature.ErrInvalid},
		{name: "another kid", token: pubsubToken(t, key, "unknown", nil), want: signature.ErrInvalid},
		{name: "no token", want: signature.ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.token != "" {
				_, err := oracle.Validate(context.Background(), c.token, pubsubAudience)
				if (err == nil) != c.google {
					t.Fatalf("idtoken: %v, want taken %v", err, c.google)
				}
			}
			r := httptest.NewRequest(http.MethodPost, "/pubsub", nil)
			if c.token != "" {
				r.Header.Set("Authorization", "Bearer "+c.token)
			}
			sigtest.WantReason(t, ver.Verify(r, body), c.want)
		})
	}
	// a token signed with an HMAC keyed with the public key, and none
	for _, alg := range []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodNone} {
		tok := jwt.NewWithClaims(alg, jwt.MapClaims{"aud": pubsubAudience, "iss": "https://accounts.google.com", "email": pubsubAccount,
			"email_verified": true, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
		tok.Header["kid"] = kid
		var s string
		if alg == jwt.SigningMethodNone {
			s, _ = tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		} else {
			s, _ = tok.SignedString([]byte(sigtest.PEMPublic(&key.PublicKey)))
		}
		r := httptest.NewRequest(http.MethodPost, "/pubsub", nil)
		r.Header.Set("Authorization", "Bearer "+s)
		sigtest.WantReason(t, ver.Verify(r, body), signature.ErrInvalid)
	}

	// the send command's signer: Google's shape, which idtoken takes, the
	// audience the URL sent to unless given, the account a claim
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	for _, public := range []string{"", pubsubAudience} {
		s, err := NewSigner("pubsub", SignConfig{PrivateKey: keyPEM, KeyID: kid, PublicURL: public, Claims: map[string]string{"email": pubsubAccount}})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, pubsubAudience, nil)
		if public != "" {
			r = httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/pubsub", nil)
		}
		if _, err := s.Sign(r, body, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := ver.Verify(r, body); err != nil {
			t.Fatalf("signed by the preset's signer (public URL %q): %v", public, err)
		}
		if _, err := oracle.Validate(context.Background(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), pubsubAudience); err != nil {
			t.Fatalf("idtoken refuses the signer's token: %v", err)
		}
	}

	// the route must name its audience and its service account
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	for _, cfg := range []VerifyConfig{
		{Scheme: "pubsub", Audiences: []string{pubsubAudience}},
		{Scheme: "pubsub", Claims: map[string][]string{"email": {pubsubAccount}}},
	} {
		if _, err := Provision(ctx, cfg); err == nil || !strings.Contains(err.Error(), "claim email") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if p := presets["pubsub"]; p.TTL != 7*day || p.MaxBody != 16<<20 || p.decl.JWKSURL != "https://www.googleapis.com/oauth2/v3/certs" {
		t.Fatalf("pubsub: ttl %v max_body %d jwks %q", p.TTL, p.MaxBody, p.decl.JWKSURL)
	}
}
