package signature_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Deliveries signed by providers' Node libraries, replayed from
// internal/sigtest/testdata (each file says which package and version
// produced it, and how).

// twilio-node 6.3.1 signs with a SharedKey in HMAC-SHA1 or HMAC-SHA256,
// as X-Twilio-Webhooks-Signature-Settings names it; the scheme accepts
// exactly what twilio-node's webhook() middleware accepts. Twilio is
// configured with both the auth token and the SharedKey secret.
func TestVerifyTwilioNodeVectors(t *testing.T) {
	vecs := sigtest.LoadTwilioNode(t)
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			u, err := url.Parse(vec.URL)
			if err != nil {
				t.Fatal(err)
			}
			v := signature.NewTwilio([]string{vecs.AuthToken, vecs.SharedKeySecret}, configuredURL(vec.URL))
			d := sigtest.NewDelivery(u.RequestURI(), []byte(vec.Body), time.Time{})
			d.Req.Header.Set("Content-Type", vec.ContentType)
			for k, val := range vec.Headers {
				d.Req.Header.Set(k, val)
			}
			err = v.Verify(d.Req, d.Body)
			if vec.Valid {
				sigtest.WantReason(t, err, nil)
				// one byte more and it fails
				sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, '1')), signature.ErrInvalid)
			} else {
				sigtest.WantReason(t, err, signature.ErrInvalid)
			}
		})
	}
}

// @shopify/shopify-api 15.0.0 reads Shopify-Hmac-Sha256 on Events
// deliveries and X-Shopify-Hmac-Sha256 on webhooks; the scheme accepts
// exactly what its webhooks.validate accepts.
func TestVerifyShopifyAPIVectors(t *testing.T) {
	vecs := sigtest.LoadShopifyAPI(t)
	v := signature.NewShopify([]string{vecs.Secret})
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			d := sigtest.NewDelivery("/webhooks", []byte(vec.Body), time.Time{})
			for k, val := range vec.Headers {
				d.Req.Header.Set(k, val)
			}
			err := v.Verify(d.Req, d.Body)
			if vec.SDK.Valid {
				sigtest.WantReason(t, err, nil)
				sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, ' ')), signature.ErrInvalid)
			} else {
				sigtest.WantReason(t, err, signature.ErrInvalid)
			}
		})
	}
}

// Discord signs both of its APIs alike: the signatures Node made for the
// discord-interactions vectors verify, and the test helper's key signs
// the same bytes (Ed25519 is deterministic).
func TestVerifyDiscordVectors(t *testing.T) {
	vecs := sigtest.LoadDiscord(t)
	if got := hex.EncodeToString(sigtest.Ed25519Public("discord-app-1")); got != vecs.PublicKey {
		t.Fatalf("public key %s, the vectors' %s", got, vecs.PublicKey)
	}
	pub, err := signature.ParseEd25519PublicKey(vecs.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewDiscord([]ed25519.PublicKey{pub}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			ts, _ := strconv.ParseInt(vec.Timestamp, 10, 64)
			signature.SetClock(t, time.Unix(ts, 0).Add(time.Minute))
			if mine := hex.EncodeToString(ed25519.Sign(sigtest.Ed25519Key("discord-app-1"), []byte(vec.Timestamp+vec.Body))); mine != vec.Signature {
				t.Fatalf("the helper's key signs %s, Node signed %s", mine, vec.Signature)
			}
			d := sigtest.NewDelivery("/discord", []byte(vec.Body), time.Time{})
			d.Req.Header.Set("X-Signature-Timestamp", vec.Timestamp)
			d.Req.Header.Set("X-Signature-Ed25519", vec.Signature)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
			sigtest.WantReason(t, v.Verify(d.Req, append(d.Body, ' ')), signature.ErrInvalid)
		})
	}
}
