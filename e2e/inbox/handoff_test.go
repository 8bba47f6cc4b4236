package inboxe2e

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The handoff to the application (docs/inbox.md: What the application
// receives), checked with the providers' own libraries as the application
// would use them: every attempt must pass the application's check however
// late it comes.

const handoffStripeSecret = "whsec_handoff_test_secret"

// stripeEvent is a Stripe event body with id.
func stripeEvent(id string) []byte {
	return []byte(`{"id":"` + id + `","object":"event","api_version":"2019-01-01","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent"}}}`)
}

// postSignedAt sends body to url signed as preset's provider signs at the
// time at, and returns the answer's status.
func postSignedAt(t *testing.T, url, preset, secret string, body []byte, at time.Time) int {
	t.Helper()
	resp, _ := postSigned(t, url, preset, secret, body, at)
	return resp.StatusCode
}

// postSigned is postSignedAt with the whole answer.
func postSigned(t *testing.T, url, preset, secret string, body []byte, at time.Time) (*http.Response, []byte) {
	t.Helper()
	signer, err := providers.NewSigner(preset, providers.SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if body, err = signer.Sign(req, body, at); err != nil {
		t.Fatal(err)
	}
	return testkit.Post(t, url, body, flatten(req.Header)...)
}

// flatten writes a header as name, value pairs.
func flatten(h http.Header) []string {
	var out []string
	for name, vs := range h {
		for _, v := range vs {
			out = append(out, name, v)
		}
	}
	return out
}

// stripeApp is an application that checks each delivery with stripe-go's
// ConstructEvent, Stripe's own check (tolerance 300 s): it answers 503 to
// the first attempt (the application is down), then 200 to a delivery
// that passes the check and 400 to one that does not.
type stripeApp struct {
	*testkit.Upstream
	mu       sync.Mutex
	verdicts []string // per attempt: "down", "ok" or the check's error
}

func newStripeApp(t *testing.T) *stripeApp {
	a := &stripeApp{}
	a.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		got := a.Requests()[call-1]
		a.mu.Lock()
		defer a.mu.Unlock()
		if call == 1 {
			a.verdicts = append(a.verdicts, "down")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, err := webhook.ConstructEventWithOptions(got.Body, got.Header.Get("Stripe-Signature"), handoffStripeSecret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			a.verdicts = append(a.verdicts, err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.verdicts = append(a.verdicts, "ok")
		w.WriteHeader(http.StatusOK)
	})
	return a
}

func (a *stripeApp) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.verdicts...)
}

// TestInboxResignsStripePastItsTolerance: an event Stripe signed six
// minutes ago (Stripe's library accepts 300 s), whose first attempt finds
// the application down, reaches it on the retry with a signature stripe-go
// accepts: the inbox re-signs each attempt. Forwarded with `keep`, the same
// retry fails Stripe's check and is dead-lettered, which is what the
// default prevents.
func TestInboxResignsStripePastItsTolerance(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	for _, tc := range []struct {
		name, forward string
		want          string // the retry's verdict
	}{
		{"default (resign)", "", "ok"},
		{"keep", "forward {\n\t\t\tsignature keep\n\t\t}", "timestamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := fmt.Sprintf("handoff_stripe_%d", time.Now().UnixNano())
			app := newStripeApp(t)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		verify {
			tolerance 1h
		}
		store redis redis://%s
		%s
		inbox %s {
			retries 100ms
			jitter 0%%
			timeout 5s
		}
	}
}`, port, source, handoffStripeSecret, srv.Addr(), tc.forward, app.URL))
			status := postSignedAt(t, testkit.SiteURL(port)+"/stripe", "stripe", handoffStripeSecret, stripeEvent("evt_"+source), time.Now().Add(-6*time.Minute))
			if status != http.StatusAccepted {
				t.Fatalf("accepted with %d, want 202", status)
			}
			testkit.WaitFor(t, 20*time.Second, "two attempts", func() (bool, string) {
				v := app.seen()
				return len(v) >= 2, strings.Join(v, "; ")
			})
			v := app.seen()
			if v[0] != "down" || !strings.Contains(v[1], tc.want) {
				t.Fatalf("attempts %q, want the retry's check to say %q", v, tc.want)
			}
			// a retry the application accepted completes the event; one it
			// refused is a dead letter
			k := inboxKeysOf(source)
			testkit.WaitFor(t, 10*time.Second, "the event's fate", func() (bool, string) {
				s := readInboxState(t, rc, k)
				if tc.want == "ok" {
					return s.stream == 0 && s.retry == 0 && s.dead == 0 && s.pending == 0, s.String()
				}
				return s.dead == 1, s.String()
			})
		})
	}
}

// TestInboxStoresNoSignatureItWillNotSend: re-signed, an event is stored
// without the provider's signature (it is made anew at each attempt);
// kept, it is stored with it.
func TestInboxStoresNoSignatureItWillNotSend(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	for _, tc := range []struct {
		forward string
		stored  bool
	}{{"", false}, {"forward {\n\t\t\tsignature keep\n\t\t}", true}} {
		source := fmt.Sprintf("handoff_stored_%d", time.Now().UnixNano())
		down := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		port := testkit.FreePort(t)
		testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		source %s
		secret %s
		store redis redis://%s
		%s
		inbox %s {
			retries 1h
			timeout 5s
		}
	}
}`, port, source, handoffStripeSecret, srv.Addr(), tc.forward, down.URL))
		if status := postSignedAt(t, testkit.SiteURL(port)+"/stripe", "stripe", handoffStripeSecret, stripeEvent("evt_"+source), time.Now()); status != http.StatusAccepted {
			t.Fatalf("accepted with %d", status)
		}
		testkit.WaitFor(t, 10*time.Second, "the first attempt", func() (bool, string) { return down.Calls.Load() >= 1, "" })
		var all strings.Builder
		k := inboxKeysOf(source)
		for _, key := range []string{k.stream, k.retry, k.dead} {
			typ, _ := rc.Type(context.Background(), key).Result()
			switch typ {
			case "stream":
				msgs, err := rc.XRange(context.Background(), key, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					fmt.Fprint(&all, m.Values)
				}
			case "zset":
				members, _ := rc.ZRange(context.Background(), key, 0, -1).Result()
				fmt.Fprint(&all, members)
			}
		}
		if got := strings.Contains(all.String(), "Stripe-Signature"); got != tc.stored {
			t.Errorf("forward %q: the stored event holds Stripe-Signature: %v, want %v:\n%s", tc.forward, got, tc.stored, all.String())
		}
	}
}

// TestInboxEdgeSignsAsStandardWebhooks: with `forward { signature edge
// <secret> }` the application receives a Standard Webhooks delivery that
// the Standard Webhooks library verifies, whatever the provider was (here
// GitHub), with the event's key as webhook-id and no provider signature,
// and no webhook-* header that came with the request: only the inbox's own.
func TestInboxEdgeSignsAsStandardWebhooks(t *testing.T) {
	srv := testkit.StartRedis(t)
	const edgeSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	wh, err := standardwebhooks.NewWebhook(edgeSecret)
	if err != nil {
		t.Fatal(err)
	}
	var up *testkit.Upstream
	verified := make(chan error, 4)
	up = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		got := up.Requests()[call-1]
		verified <- wh.Verify(got.Body, got.Header)
		w.WriteHeader(http.StatusNoContent)
	})
	source := fmt.Sprintf("handoff_edge_%d", time.Now().UnixNano())
	t.Setenv("HANDOFF_APP_TOKEN", "app-token-123")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency github {
		source %s
		secret gh-secret
		store redis redis://%s
		forward {
			signature edge %s
			header    Authorization "Bearer {env.HANDOFF_APP_TOKEN}"
		}
		inbox %s
	}
}`, port, source, srv.Addr(), edgeSecret, up.URL))
	body := []byte(`{"action":"opened","number":1}`)
	signer, _ := providers.NewSigner("github", providers.SignConfig{Secret: "gh-secret"})
	req, _ := http.NewRequest(http.MethodPost, "/", nil)
	req.Header.Set("X-GitHub-Delivery", "d-"+source)
	req.Header.Set("webhook-id", "forged-from-outside")
	req.Header.Set("Webhook-Replay-Suspected", "forged-from-outside")
	body, _ = signer.Sign(req, body, time.Now())
	resp, _ := testkit.Post(t, testkit.SiteURL(port)+"/gh", body, flatten(req.Header)...)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accepted with %d", resp.StatusCode)
	}
	select {
	case err := <-verified:
		if err != nil {
			t.Fatalf("the Standard Webhooks library refused the delivery: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}
	got := up.Requests()[0]
	if got.Header.Get("webhook-id") != "d-"+source || got.Header.Get("Webhook-Source") != source ||
		got.Header.Get("X-Hub-Signature-256") != "" || got.Header.Get("Authorization") != "Bearer app-token-123" {
		t.Fatalf("delivered headers: %v", got.Header)
	}
	// no webhook-* header from outside is passed on, only the inbox's own
	if v := got.Header.Values("Webhook-Replay-Suspected"); len(v) > 0 || got.Header.Get("Webhook-Attempt") != "1" {
		t.Fatalf("delivered Webhook-Replay-Suspected %q, Webhook-Attempt %q: want none from outside, and attempt 1", v, got.Header.Get("Webhook-Attempt"))
	}
}

// TestInboxDeliversOverMutualTLS: an application behind https with a
// private CA that requires a client certificate gets its deliveries when
// the inbox's tls block names the CA and the certificate; without the
// client certificate its TLS handshake refuses every attempt.
func TestInboxDeliversOverMutualTLS(t *testing.T) {
	srv := testkit.StartRedis(t)
	ca := testkit.NewCA(t, "Handoff test root")
	server, client := ca.Server(t), ca.Client(t, pkix.Name{CommonName: "webhook-edge"})
	var delivered atomic.Int64
	var peer atomic.Value
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			peer.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		delivered.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	app.TLS = &tls.Config{Certificates: []tls.Certificate{server.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	app.StartTLS()
	t.Cleanup(app.Close)
	deliverTo := "https://localhost:" + app.URL[strings.LastIndex(app.URL, ":")+1:] + "/hook"
	for _, tc := range []struct {
		name, tls string
		delivers  bool
	}{
		{"without a client certificate", fmt.Sprintf("tls {\n\t\t\t\tca %s\n\t\t\t}", ca.PEMFile), false},
		{"with one", fmt.Sprintf("tls {\n\t\t\t\tca %s\n\t\t\t\tclient_cert %s %s\n\t\t\t\tserver_name localhost\n\t\t\t}", ca.PEMFile, client.CertFile, client.KeyFile), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := delivered.Load()
			source := fmt.Sprintf("handoff_mtls_%d", time.Now().UnixNano())
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s
		inbox %s {
			retries 1h
			timeout 5s
			%s
		}
	}
}`, port, source, srv.Addr(), deliverTo, tc.tls))
			resp, _ := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"id":"`+source+`"}`), "Idempotency-Key", source)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("accepted with %d", resp.StatusCode)
			}
			if tc.delivers {
				testkit.WaitFor(t, 10*time.Second, "the delivery", func() (bool, string) { return delivered.Load() > before, "" })
				if peer.Load() != "webhook-edge" {
					t.Fatalf("the application saw client certificate %v", peer.Load())
				}
				return
			}
			// the attempt fails at the handshake and is scheduled for a
			// retry an hour later
			testkit.WaitFor(t, 10*time.Second, "the failed attempt scheduled", func() (bool, string) {
				s := readInboxState(t, srv.Client(t), inboxKeysOf(source))
				return s.retry == 1, s.String()
			})
			if delivered.Load() != before {
				t.Fatal("delivered without a client certificate")
			}
		})
	}
}
