package providers_test

import (
	"crypto/rsa"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Google Cloud Pub/Sub through a real Caddy: the preset loads Google's
// certificates from their URL (a stand-in for Google's host here) at
// provision; a push with Google's token reaches the application once,
// one for another service account does not.
func TestPubSubThroughCaddy(t *testing.T) {
	key := sigtest.RSAKey("google")
	requests := providerHosts(t, map[string]string{"/oauth2/v3/certs": string(sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"k1": key}))},
		"www.googleapis.com")
	up := testkit.NewUpstream(t, nil)
	const audience, account = "https://hooks.example.com/pubsub", "push@acme-prod.iam.gserviceaccount.com"
	_, base := proxy(t, "webhook_idempotency pubsub {\n\t\taudience "+audience+"\n\t\tclaim email "+account+"\n\t}", up)
	if r := next(t, requests, "Google's certificates"); r != "https://www.googleapis.com/oauth2/v3/certs" {
		t.Fatalf("fetched %s", r)
	}
	token := func(email string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"aud": audience, "iss": "https://accounts.google.com", "email": email, "email_verified": true,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "sub": "113774264463038321964",
		})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	body := []byte(`{"message":{"data":"SGVsbG8=","messageId":"2070443601311540","message_id":"2070443601311540","publishTime":"2026-12-06T10:00:00.000Z"},"subscription":"projects/acme-prod/subscriptions/orders-push"}`)
	resp, first := testkit.Post(t, base+"/pubsub", body, "Authorization", token(account))
	testkit.WantNew(t, resp, first, http.StatusOK)
	resp, got := testkit.Post(t, base+"/pubsub", body, "Authorization", token(account))
	testkit.WantReplay(t, resp, got, http.StatusOK, string(first))
	resp, got = testkit.Post(t, base+"/pubsub", []byte(`{"message":{"data":"","messageId":"9"}}`), "Authorization", token("someone@other.iam.gserviceaccount.com"))
	if resp.StatusCode != 401 {
		t.Fatalf("another service account: %d %s", resp.StatusCode, got)
	}
	up.WantCalls(t, 1)
}
