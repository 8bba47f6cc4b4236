package providers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// BenchmarkPresetVerify is one valid delivery verified through a preset,
// each scheme family's cache warm (the delivery verified once before the
// run): the HMAC presets `github` and `stripe` (2 KB bodies; the
// baseline), `sendgrid` (ECDSA P-256 over the timestamp and a 2 KB batch
// of events), `sns` (RSA-SHA256, SignatureVersion 2, with the signing
// certificate fetched once from SNS's host and cached; its notification is
// about 1 KB) and `pubsub` (an RS256 JWT in Authorization, its key from
// Google's key set, fetched once and cached, and its claims checked).
// Fetches reach a stand-in for the provider's hosts. Besides the wall
// time it reports the process's CPU time per delivery (cpu-ns/op).
//
//	go test -run '^$' -bench 'PresetVerify' -benchmem -count 3 ./providers
func BenchmarkPresetVerify(b *testing.B) {
	body := sigtest.BenchBody("stripe")
	for _, scheme := range []string{"github", "stripe"} {
		b.Run(scheme, func(b *testing.B) {
			var c sigtest.Case
			for _, cc := range sigtest.Cases() {
				if cc.Scheme == scheme && cc.Name == "" {
					c = cc
				}
			}
			c.Body = string(body)
			d := c.Delivery(b, c.Secrets[0], time.Now())
			benchPreset(b, mustBuild(b, VerifyConfig{Scheme: scheme, Secrets: []string{c.Secrets[0]}}), d.Req, d.Body)
		})
	}
	b.Run("sendgrid", func(b *testing.B) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			b.Fatal(err)
		}
		der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
		event := `{"email":"hello@world.com","event":"delivered","sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA","sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0","timestamp":1600112492}`
		events := make([]string, 0, 12)
		for n := 2; n < 2048; n += len(event) + 1 {
			events = append(events, event)
		}
		batch := []byte("[" + strings.Join(events, ",") + "]")
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		sum := sha256.Sum256(append([]byte(ts), batch...))
		sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
		if err != nil {
			b.Fatal(err)
		}
		v := mustBuild(b, VerifyConfig{Scheme: "sendgrid", PublicKeys: []string{base64.StdEncoding.EncodeToString(der)}})
		benchPreset(b, v, sendGridRequest(base64.StdEncoding.EncodeToString(sig), ts), batch)
	})
	b.Run("sns", func(b *testing.B) {
		key := sigtest.RSAKey("sns")
		const certPath = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
		hosts := snsHosts(b, key, certPath)
		msg := sigtest.SNSMessage(key, "2", "https://sns.us-east-1.amazonaws.com"+certPath, sigtest.SNSNotification("m1", snsTopic))
		v := mustBuild(b, VerifyConfig{Scheme: "sns", Claims: map[string][]string{"TopicArn": {snsTopic}}})
		benchPreset(b, v, snsPost(msg), msg)
		if n := hosts.Hits.Load(); n != 1 {
			b.Fatalf("the certificate was fetched %d times, want once", n)
		}
	})
	b.Run("pubsub", func(b *testing.B) {
		key := sigtest.RSAKey("google")
		ver, hosts := pubsubRoute(b, key)
		r := httptest.NewRequest(http.MethodPost, "/pubsub", nil)
		r.Header.Set("Authorization", "Bearer "+pubsubToken(b, key, pubsubKid, nil))
		benchPreset(b, ver, r, pubsubBody)
		if n := hosts.Hits.Load(); n != 1 {
			b.Fatalf("the key set was fetched %d times, want once", n)
		}
	})
}

// benchPreset measures v on one valid delivery, verified once before.
func benchPreset(b *testing.B, v signature.Verifier, r *http.Request, body []byte) {
	if err := v.Verify(r, body); err != nil {
		b.Fatalf("the benchmark's delivery is refused: %v", err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testkit.CPUTime()
	for b.Loop() {
		if err := v.Verify(r, body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(testkit.CPUTime()-cpu)/float64(b.N), "cpu-ns/op")
}
