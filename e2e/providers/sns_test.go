package providers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// providerHosts stands in for a provider's hosts for the test: every
// fetch the module makes (certificates, key sets, SNS's confirmations)
// reaches it; it serves docs by path and reports each request.
func providerHosts(t *testing.T, docs map[string]string, names ...string) chan string {
	t.Helper()
	hosts := testkit.NewHosts(t, names...)
	for path, doc := range docs {
		hosts.Serve(path, doc)
	}
	old := keyset.Client
	keyset.Client = hosts.Client()
	t.Cleanup(func() { keyset.Client = old })
	return hosts.Requests
}

// next waits for the stand-in's next request.
func next(t *testing.T, requests chan string, what string) string {
	t.Helper()
	select {
	case r := <-requests:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("no request for %s", what)
		return ""
	}
}

// Amazon SNS through a real Caddy, with a stand-in for SNS's hosts: the
// subscription is confirmed by a GET of its SubscribeURL once the
// confirmation is answered, without reaching the application; a
// notification reaches it once and its retry is replayed; an unsubscribe
// confirmation reaches it and its URL is never visited; a raw message and
// another topic's are refused.
func TestSNSThroughCaddy(t *testing.T) {
	const topic = "arn:aws:sns:us-east-1:123456789012:orders"
	const certPath = "/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem"
	key := sigtest.RSAKey("sns")
	requests := providerHosts(t, map[string]string{certPath: sigtest.SelfSignedCert(t, key, "sns.amazonaws.com"), "/": "<ConfirmSubscriptionResponse/>"},
		"sns.us-east-1.amazonaws.com")
	cert := "https://sns.us-east-1.amazonaws.com" + certPath
	up := testkit.NewUpstream(t, nil)
	c, base := proxy(t, fmt.Sprintf("webhook_idempotency sns {\n\t\tclaim TopicArn %s\n\t}", topic), up)
	url := base + "/sns"
	post := func(body []byte, header ...string) (*http.Response, []byte) {
		return testkit.Post(t, url, body, append([]string{"Content-Type", "text/plain; charset=UTF-8"}, header...)...)
	}

	subscribe := "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=" + topic + "&Token=e2e-subscribe"
	resp, got := post(sigtest.SNSMessage(key, "1", cert, sigtest.SNSConfirmation("SubscriptionConfirmation", topic, subscribe)),
		"X-Amz-Sns-Message-Type", "SubscriptionConfirmation")
	if resp.StatusCode != 200 {
		t.Fatalf("the confirmation: %d %s", resp.StatusCode, got)
	}
	if r := next(t, requests, "the certificate"); r != cert {
		t.Fatalf("first request %s, want the certificate", r)
	}
	if r := next(t, requests, "the confirmation"); r != subscribe {
		t.Fatalf("visited %s, want %s", r, subscribe)
	}
	up.WantCalls(t, 0)
	wantMetric(t, c, 1, "caddy_webhook_idempotency_requests_total", "source", "sns", "result", "handshake")

	n := sigtest.SNSMessage(key, "2", cert, sigtest.SNSNotification("e2e-1", topic))
	resp, got = post(n)
	testkit.WantNew(t, resp, got, 200)
	resp, again := post(n)
	testkit.WantReplay(t, resp, again, 200, string(got))
	up.WantCalls(t, 1)

	unsubscribe := sigtest.SNSMessage(key, "1", cert, sigtest.SNSConfirmation("UnsubscribeConfirmation", topic,
		"https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn="+topic+"&Token=e2e-resubscribes"))
	resp, got = post(unsubscribe)
	testkit.WantNew(t, resp, got, 200)
	up.WantCalls(t, 2)

	resp, got = post([]byte(`{"order":"o-2"}`), "X-Amz-Sns-Rawdelivery", "true")
	if resp.StatusCode != 401 || string(got) != `{"error":"raw message delivery carries no signature: turn RawMessageDelivery off for this subscription"}` {
		t.Fatalf("a raw message: %d %s", resp.StatusCode, got)
	}
	resp, got = post(sigtest.SNSMessage(key, "1", cert, sigtest.SNSNotification("e2e-2", "arn:aws:sns:us-east-1:999999999999:orders")))
	if resp.StatusCode != 401 {
		t.Fatalf("another topic's message: %d %s", resp.StatusCode, got)
	}
	up.WantCalls(t, 2)
	select {
	case r := <-requests:
		t.Fatalf("requested %s after the confirmation", r)
	default:
	}
}
