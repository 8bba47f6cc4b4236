package providers

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Bitbucket: X-Hub-Signature: sha256=<hex HMAC-SHA256 of the body> under the
// webhook's secret (Bitbucket Data Center, "Event payload": Webhook
// secrets; Bitbucket Cloud sends the same header).
func TestBitbucket(t *testing.T) {
	c := bodyHMACCase{preset: "bitbucket", header: "X-Hub-Signature", sign: hmacOf(sha256.New, "sha256=", false)}
	secret := "bitbucket-webhook-secret"
	body := []byte(`{"push":{"changes":[{"new":{"type":"branch","name":"main","target":{"hash":"709d658dc5b6d6afcd46049c2f332ee3f515a67d","date":"2027-01-01T00:00:00+00:00","message":"Ünïcödé\n"}}}]},"repository":{"full_name":"team/repo"}}`)
	checkBodyHMAC(t, c, secret, body)
	// a sha1= signature (another algorithm of Data Center's) is not taken
	// for a sha256 one
	v := mustBuild(t, VerifyConfig{Scheme: "bitbucket", Secrets: []string{secret}})
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("X-Hub-Signature", "sha1="+strings.TrimPrefix(c.sign(secret, body), "sha256="))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
	wantPreset(t, "bitbucket", []string{"body"}, 0, nil)
}
