package providers_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Twilio signs with a SharedKey, in HMAC-SHA1 or HMAC-SHA256, when a
// Webhook Rule matches the URL, and says which in
// X-Twilio-Webhooks-Signature-Settings. The deliveries twilio-node 6.3.1
// signed (internal/sigtest/testdata/twilio-node-6.3.1.json) are sent
// through the twilio preset, configured with the auth token and the
// SharedKey secret: those its webhook() middleware accepts reach the
// application, the others get 401.
func TestTwilioSharedKeySignatures(t *testing.T) {
	vecs := sigtest.LoadTwilioNode(t)
	up := testkit.NewUpstream(t, nil)
	_, base := proxy(t, `webhook_idempotency twilio {
		verify twilio {
			secret `+quote(vecs.AuthToken)+` `+quote(vecs.SharedKeySecret)+`
			url    https://hooks.example.com/sms
		}
	}`, up)
	accepted := int64(0)
	for i, vec := range vecs.Vectors {
		u, err := url.Parse(vec.URL)
		if err != nil {
			t.Fatal(err)
		}
		// each delivery its own idempotency token, as Twilio sends it
		token := "idem-" + string(rune('a'+i))
		resp, body := testkit.Post(t, base+u.RequestURI(), []byte(vec.Body), headerPairs(vec.Headers, "Content-Type", vec.ContentType, "I-Twilio-Idempotency-Token", token)...)
		if !vec.Valid {
			if resp.StatusCode != http.StatusUnauthorized || string(body) != `{"error":"invalid signature"}` {
				t.Fatalf("%s: %d %s; twilio-node refuses it", vec.Name, resp.StatusCode, body)
			}
			continue
		}
		testkit.WantNew(t, resp, body, http.StatusOK)
		accepted++
		if got := up.Requests()[accepted-1].Body; string(got) != vec.Body {
			t.Fatalf("%s: the application got %s", vec.Name, got)
		}
	}
	up.WantCalls(t, accepted)
}
