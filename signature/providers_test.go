package signature_test

import (
	"crypto"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

func TestVerifyStripeSecretIsRawBytes(t *testing.T) {
	// a Standard Webhooks verifier would base64-decode whsec_…; Stripe must not
	secret := sigtest.StdSecretA
	d := sigtest.Cases()[0].Delivery(t, secret, time.Now())
	v := signature.NewStripe([]string{secret}, signature.DefaultTolerance)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	// and the same header signed with the decoded key fails
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	ts := sigtest.Unix(time.Now())
	d.Req.Header.Set("Stripe-Signature", "t="+ts+",v1="+sigtest.HMACHex(string(key), ts, ".", string(d.Body)))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
}

func TestVerifyStripeSeveralSignatures(t *testing.T) {
	v := signature.NewStripe([]string{"whsec_new"}, signature.DefaultTolerance)
	body := []byte(`{"id":"evt_1"}`)
	ts := sigtest.Unix(time.Now())
	good := sigtest.HMACHex("whsec_new", ts, ".", string(body))
	bad := sigtest.HMACHex("whsec_old", ts, ".", string(body))
	for _, h := range []string{
		"t=" + ts + ",v1=" + bad + ",v1=" + good,
		"t=" + ts + ",v0=" + bad + ",v1=" + good,
		"v1=" + good + ", t=" + ts,
	} {
		d := sigtest.NewDelivery("/", body, time.Time{})
		d.Req.Header.Set("Stripe-Signature", h)
		sigtest.WantReason(t, v.Verify(d.Req, body), nil)
	}
	// past the cap, a valid signature is not looked at
	d := sigtest.NewDelivery("/", body, time.Time{})
	d.Req.Header.Set("Stripe-Signature", "t="+ts+strings.Repeat(",v1="+bad, signature.MaxHeaderItems)+",v1="+good)
	sigtest.WantReason(t, v.Verify(d.Req, body), signature.ErrInvalid)
	// a v0 (test-mode) signature alone is not accepted
	d.Req.Header.Set("Stripe-Signature", "t="+ts+",v0="+good)
	sigtest.WantReason(t, v.Verify(d.Req, body), signature.ErrInvalid)
}

func TestVerifyPaddleSeveralSignatures(t *testing.T) {
	v := signature.NewPaddle([]string{"pdl_new"}, signature.DefaultTolerance)
	body := []byte(`{"notification_id":"ntf_1"}`)
	ts := sigtest.Unix(time.Now())
	d := sigtest.NewDelivery("/", body, time.Time{})
	d.Req.Header.Set("Paddle-Signature", "ts="+ts+";h1="+sigtest.HMACHex("pdl_old", ts, ":", string(body))+";h1="+sigtest.HMACHex("pdl_new", ts, ":", string(body)))
	sigtest.WantReason(t, v.Verify(d.Req, body), nil)
}

func TestVerifyStandardWebhooksSecrets(t *testing.T) {
	for _, bad := range []string{"whsec_not base64!", "whsec_"} {
		if _, err := signature.NewStandardWebhooks("webhook-", []string{bad}, 0); err == nil {
			t.Errorf("secret %q accepted", bad)
		} else if strings.Contains(err.Error(), "not base64!") {
			t.Errorf("error reveals the secret: %v", err)
		}
	}
	// the prefix is optional, as in the reference library
	v, err := signature.NewStandardWebhooks("webhook-", []string{strings.TrimPrefix(sigtest.StdSecretA, "whsec_")}, signature.DefaultTolerance)
	if err != nil {
		t.Fatal(err)
	}
	d := sigtest.StandardCase("standard", "webhook-").Delivery(t, sigtest.StdSecretA, time.Now())
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
}

func TestVerifyGitLabSigningToken(t *testing.T) {
	// GitLab's signing tokens are Standard Webhooks secrets
	v, err := signature.NewGitLab([]string{"plain-token", sigtest.StdSecretB}, signature.DefaultTolerance)
	if err != nil {
		t.Fatal(err)
	}
	std := sigtest.StandardCase("gitlab", "webhook-")
	d := std.Delivery(t, sigtest.StdSecretB, time.Now())
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, ' ')), signature.ErrInvalid)
	d = std.Delivery(t, sigtest.StdSecretB, time.Now().Add(-time.Hour))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)
	// the plain token still works
	d = sigtest.NewDelivery("/", []byte(`{}`), time.Time{})
	d.Req.Header.Set("X-Gitlab-Token", "plain-token")
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	// a whsec_ secret is not accepted as a plain token
	d.Req.Header.Set("X-Gitlab-Token", sigtest.StdSecretB)
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)

	// with signing tokens only, the plain header proves nothing
	only, _ := signature.NewGitLab([]string{sigtest.StdSecretB}, signature.DefaultTolerance)
	sigtest.WantReason(t, only.Verify(d.Req, d.Body), signature.ErrMissing)
}

func TestVerifyMercadoPagoManifest(t *testing.T) {
	signature.SetClock(t, time.Unix(1704908010, 0))
	v := signature.NewMercadoPago([]string{"mp"}, signature.DefaultTolerance)
	sign := func(manifest string) string { return sigtest.HMACHex("mp", manifest) }
	t.Run("absent parts are left out", func(t *testing.T) {
		d := sigtest.NewDelivery("/mp", []byte(`{"type":"test"}`), time.Time{})
		d.Req.Header.Set("x-signature", "ts=1704908010,v1="+sign("ts:1704908010;"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("milliseconds and spaces", func(t *testing.T) {
		d := sigtest.NewDelivery("/mp?data.id=123&type=payment", []byte(`{"data":{"id":123}}`), time.Time{})
		d.Req.Header.Set("x-request-id", "req-1")
		d.Req.Header.Set("x-signature", "ts=1704908010000, v1="+sign("id:123;request-id:req-1;ts:1704908010000;"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("a changed request id fails", func(t *testing.T) {
		d := sigtest.NewDelivery("/mp?data.id=123", []byte(`{}`), time.Time{})
		d.Req.Header.Set("x-request-id", "req-2")
		d.Req.Header.Set("x-signature", "ts=1704908010,v1="+sign("id:123;request-id:req-1;ts:1704908010;"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	})
	t.Run("a body about another resource fails", func(t *testing.T) {
		d := sigtest.NewDelivery("/mp?data.id=123", []byte(`{"data":{"id":"999"}}`), time.Time{})
		d.Req.Header.Set("x-signature", "ts=1704908010,v1="+sign("id:123;ts:1704908010;"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	})
}

func TestVerifyTokenDoesNotAcceptPrefixes(t *testing.T) {
	v, _ := signature.NewToken("X-Token", "", []string{"correct-horse"})
	for _, tok := range []string{"correct", "correct-horse-battery", "", "Correct-horse"} {
		d := sigtest.NewDelivery("/", nil, time.Time{})
		d.Req.Header.Set("X-Token", tok)
		if err := v.Verify(d.Req, nil); err == nil {
			t.Errorf("token %q accepted", tok)
		}
	}
}

func TestVerifyGenericConstructorErrors(t *testing.T) {
	secrets := []string{"s"}
	refused := func(name string) func(signature.Verifier, error) {
		return func(v signature.Verifier, err error) {
			t.Helper()
			if err == nil || v != nil {
				t.Errorf("%s: %v, %v", name, v, err)
			}
		}
	}
	refused("hmac without header")(signature.NewHMAC("", "", crypto.SHA256, signature.Hex, secrets))
	refused("hmac without hash")(signature.NewHMAC("X", "", 0, signature.Hex, secrets))
	refused("hmac with an unknown hash")(signature.NewHMAC("X", "", crypto.Hash(200), signature.Hex, secrets))
	refused("hmac with an unknown encoding")(signature.NewHMAC("X", "", crypto.SHA256, 7, secrets))
	refused("token without header")(signature.NewToken("", "", secrets))
}
