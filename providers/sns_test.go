package providers

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

const snsTopic = "arn:aws:sns:us-east-1:123456789012:orders"

// snsHosts stands in for SNS's hosts, serving the certificate of key at
// certPath; its certificates are trusted for having come from there.
func snsHosts(t testing.TB, key *rsa.PrivateKey, certPath string) *testkit.Hosts {
	t.Helper()
	h := providerHosts(t, "sns.us-east-1.amazonaws.com", "sns.us-west-2.amazonaws.com", "sns.cn-north-1.amazonaws.com.cn", "s3.amazonaws.com", "evil.example")
	now := time.Now()
	h.Serve(certPath, selfSigned(t, key, "sns.amazonaws.com", now.Add(-time.Hour), now.Add(time.Hour)))
	return h
}

func snsPost(body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/sns", nil)
	var m struct{ Type, MessageId string }
	_ = json.Unmarshal(body, &m)
	r.Header.Set("X-Amz-Sns-Message-Type", m.Type)
	r.Header.Set("X-Amz-Sns-Message-Id", m.MessageId)
	return r
}

// The deliveries sns-validator 0.3.5 (AWS's Node validator) judged
// (../signature/testdata/sns-validator-0.3.5.json), through the preset:
// it takes what the validator took, refuses what it refused, and fetches
// the certificate once.
func TestSNSValidatorVectors(t *testing.T) {
	var vecs struct {
		SigningCert string `json:"signing_cert"`
		Vectors     []struct {
			Name  string `json:"name"`
			Body  string `json:"body"`
			Valid bool   `json:"valid"`
		} `json:"vectors"`
	}
	data, err := os.ReadFile("../signature/testdata/sns-validator-0.3.5.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &vecs); err != nil {
		t.Fatal(err)
	}
	hosts := providerHosts(t, "sns.us-east-1.amazonaws.com")
	hosts.Serve("/SimpleNotificationService-7ff5318490ec183fbaddaa2a969abfda.pem", vecs.SigningCert)
	v := mustBuild(t, VerifyConfig{Scheme: "sns", Claims: map[string][]string{"TopicArn": {snsTopic}}})
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			want := signature.ErrInvalid
			if vec.Valid {
				want = nil
			}
			sigtest.WantReason(t, v.Verify(snsPost([]byte(vec.Body)), []byte(vec.Body)), want)
		})
	}
	if hits := hosts.Hits.Load(); hits != 1 {
		t.Fatalf("the certificate was fetched %d times, want once", hits)
	}
}

func TestSNS(t *testing.T) {
	key := sigtest.RSAKey("sns")
	const certPath = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
	hosts := snsHosts(t, key, certPath)
	cert := "https://sns.us-east-1.amazonaws.com" + certPath
	v := mustBuild(t, VerifyConfig{Scheme: "sns", Claims: map[string][]string{"TopicArn": {snsTopic}}})
	for _, c := range []struct {
		name string
		body []byte
		want *signature.Error
	}{
		{"version 1", sigtest.SNSMessage(key, "1", cert, sigtest.SNSNotification("m1", snsTopic)), nil},
		{"version 2", sigtest.SNSMessage(key, "2", cert, sigtest.SNSNotification("m2", snsTopic)), nil},
		{"another region's host", sigtest.SNSMessage(key, "2", "https://sns.us-west-2.amazonaws.com"+certPath, sigtest.SNSNotification("m3", snsTopic)), nil},
		{"an unexpected topic", sigtest.SNSMessage(key, "1", cert, sigtest.SNSNotification("m4", "arn:aws:sns:us-east-1:999999999999:orders")), signature.ErrInvalid},
		{"another key", sigtest.SNSMessage(sigtest.RSAKey("not sns"), "1", cert, sigtest.SNSNotification("m5", snsTopic)), signature.ErrInvalid},
		{"version 3", sigtest.SNSMessage(key, "3", cert, sigtest.SNSNotification("m6", snsTopic)), signature.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) { sigtest.WantReason(t, v.Verify(snsPost(c.body), c.body), c.want) })
	}
	// one changed byte of the message
	body := sigtest.SNSMessage(key, "1", cert, sigtest.SNSNotification("m7", snsTopic))
	changed := []byte(strings.Replace(string(body), "Order shipped", "Order shipper", 1))
	sigtest.WantReason(t, v.Verify(snsPost(changed), changed), signature.ErrInvalid)

	// certificate URLs off SNS's hosts, or not https, are refused before
	// any request (an S3 bucket is on amazonaws.com too)
	hits := hosts.Hits.Load()
	for _, u := range []string{
		"https://s3.amazonaws.com" + certPath,
		"https://evil.example" + certPath,
		"http://sns.us-east-1.amazonaws.com" + certPath,
		"https://sns.us-east-1.amazonaws.com.evil.example" + certPath,
		"https://sns.us-east-1.amazonaws.com/cert.txt",
	} {
		b := sigtest.SNSMessage(key, "1", u, sigtest.SNSNotification("m8", snsTopic))
		sigtest.WantReason(t, v.Verify(snsPost(b), b), signature.ErrInvalid)
	}
	if got := hosts.Hits.Load(); got != hits {
		t.Fatalf("%d requests for certificate URLs off SNS's hosts", got-hits)
	}

	// a raw message has no envelope and no signature: refused, saying why
	r := snsPost([]byte(`{"order":"o-1"}`))
	r.Header.Set("X-Amz-Sns-Rawdelivery", "true")
	err := v.Verify(r, []byte(`{"order":"o-1"}`))
	if err == nil || !strings.Contains(err.Error(), "RawMessageDelivery") {
		t.Fatalf("a raw delivery: %v", err)
	}
	// the route must say which topics it takes
	if _, err := buildVerifier(VerifyConfig{Scheme: "sns"}); err == nil || !strings.Contains(err.Error(), "claim TopicArn") {
		t.Fatalf("sns without topics: %v", err)
	}
	if p := presets["sns"]; p.InFlight != "wait" {
		t.Fatalf("sns in_flight %q, want wait: SNS takes a 409 as final", p.InFlight)
	}
}

// A verified SubscriptionConfirmation is answered 200 and confirmed by a
// GET of its SubscribeURL once answered; one whose URL is not an SNS
// ConfirmSubscription URL over https, and an UnsubscribeConfirmation, are
// passed on, their URLs never visited.
func TestSNSSubscriptionConfirmation(t *testing.T) {
	key := sigtest.RSAKey("sns")
	const certPath = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
	hosts := snsHosts(t, key, certPath)
	hosts.Serve("/", "<ConfirmSubscriptionResponse/>")
	cert := "https://sns.us-east-1.amazonaws.com" + certPath
	core, logs := observer.New(zap.InfoLevel)
	hs, err := NewHandshake("sns", HandshakeConfig{Verified: true, Logger: zap.New(core)})
	if err != nil || hs == nil || !hs.Signed() {
		t.Fatalf("the sns handshake: %v %v", hs, err)
	}
	// logged waits for the entry of a confirmation's end, and checks it
	// names the topic and the outcome, and never the token
	logged := func(msg string, level zapcore.Level, confirmed bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); logs.FilterMessage(msg).Len() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q logged: %v", msg, logs.All())
			}
		}
		e := logs.FilterMessage(msg).TakeAll()[0]
		fields := e.ContextMap()
		if e.Level != level || fields["topic_arn"] != snsTopic || fields["confirmed"] != confirmed {
			t.Fatalf("%q logged at %s with %v", msg, e.Level, fields)
		}
		if text := fmt.Sprint(e.Message, fields); strings.Contains(text, "2336412f37fb687f5d51e6e2425a") || strings.Contains(text, "Token=") {
			t.Fatalf("the log holds the subscription's token: %s", text)
		}
	}
	confirmation := func(typ, subscribeURL string) []byte {
		return sigtest.SNSMessage(key, "1", cert, sigtest.SNSConfirmation(typ, snsTopic, subscribeURL))
	}
	v := mustBuild(t, VerifyConfig{Scheme: "sns", Claims: map[string][]string{"TopicArn": {snsTopic}}})

	u := "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + snsTopic + "&Token=2336412f37fb687f5d51e6e2425a"
	body := confirmation("SubscriptionConfirmation", u)
	sigtest.WantReason(t, v.Verify(snsPost(body), body), nil)
	// the requests from here on (the certificate is cached)
	if r := <-hosts.Requests; r != cert {
		t.Fatalf("requested %s, want the certificate", r)
	}
	ctx, answered := context.WithCancel(context.Background())
	a, ok := hs.Answer(snsPost(body).WithContext(ctx), body)
	if !ok || a.Status != http.StatusOK {
		t.Fatalf("the confirmation: %+v %v", a, ok)
	}
	if len(hosts.Requests) != 0 {
		t.Fatal("the SubscribeURL was visited before the delivery was answered")
	}
	answered()
	select {
	case got := <-hosts.Requests:
		if got != u {
			t.Fatalf("visited %s, want %s", got, u)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the SubscribeURL was not visited")
	}

	logged("SNS subscription confirmed", zap.InfoLevel, true)
	running := func() int {
		snsConfirmations.mu.Lock()
		defer snsConfirmations.mu.Unlock()
		return snsConfirmations.running
	}
	if n := running(); n != 0 {
		t.Fatalf("%d confirmations running once logged", n)
	}

	// SNS refuses the confirmation: logged, not confirmed, the URL (and
	// its token) out of the error
	refused := "https://sns.us-east-1.amazonaws.com/refused?Action=ConfirmSubscription&TopicArn=" + snsTopic + "&Token=2336412f37fb687f5d51e6e2425a"
	body = confirmation("SubscriptionConfirmation", refused)
	sigtest.WantReason(t, v.Verify(snsPost(body), body), nil)
	ctx, answered = context.WithCancel(context.Background())
	if _, ok := hs.Answer(snsPost(body).WithContext(ctx), body); !ok {
		t.Fatal("the second confirmation was not answered")
	}
	answered()
	if got := <-hosts.Requests; got != refused {
		t.Fatalf("visited %s, want %s", got, refused)
	}
	logged("confirming the SNS subscription failed; confirm it in the SNS console, or answer SNS's next confirmation", zap.WarnLevel, false)

	// never visited: another host, http, another action, an unsubscribe
	hits := hosts.Hits.Load()
	for _, c := range []struct{ typ, url string }{
		{"SubscriptionConfirmation", "https://evil.example/?Action=ConfirmSubscription&TopicArn=" + snsTopic},
		{"SubscriptionConfirmation", "https://s3.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + snsTopic},
		{"SubscriptionConfirmation", "http://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + snsTopic},
		{"SubscriptionConfirmation", "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&TopicArn=" + snsTopic},
		{"UnsubscribeConfirmation", "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + snsTopic + "&Token=resubscribes"},
	} {
		body := confirmation(c.typ, c.url)
		sigtest.WantReason(t, v.Verify(snsPost(body), body), nil)
		if a, ok := hs.Answer(snsPost(body), body); ok {
			t.Errorf("%s %s answered %+v, want passed on", c.typ, c.url, a)
		}
		if c.typ == "SubscriptionConfirmation" {
			logged("SNS subscription confirmation passed on: its SubscribeURL is not an SNS ConfirmSubscription URL over https, and is never visited", zap.WarnLevel, false)
		}
	}
	// a notification is no handshake
	n := sigtest.SNSMessage(key, "1", cert, sigtest.SNSNotification("m9", snsTopic))
	if _, ok := hs.Answer(snsPost(n), n); ok {
		t.Fatal("a notification taken for a confirmation")
	}
	if n := running(); n != 0 || hosts.Hits.Load() != hits {
		t.Fatalf("%d confirmations running, %d requests, for URLs never to visit", n, hosts.Hits.Load()-hits)
	}
}
