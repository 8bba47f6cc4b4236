package webhookidempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func TestCaddyfileForward(t *testing.T) {
	h, err := parseTestHandler("webhook_idempotency stripe {\n\tsecret s\n\tforward {\n\t\tsignature edge whsec_a whsec_b\n\t\theader x-app-token {env.T}\n\t}\n}")
	if err != nil {
		t.Fatal(err)
	}
	if got := handlerJSON(t, h); !strings.Contains(got, `"forward":{"signature":"edge","edge_secrets":["whsec_a","whsec_b"],"headers":{"X-App-Token":"{env.T}"}}`) {
		t.Fatalf("adapted: %s", got)
	}
	for _, tc := range []struct{ name, input, want string }{
		{"bad mode", "webhook_idempotency stripe {\n\tforward {\n\t\tsignature sign\n\t}\n}", "invalid forward signature 'sign': want keep, resign, edge or strip, at Testfile:3"},
		{"edge without a secret", "webhook_idempotency stripe {\n\tforward {\n\t\tsignature edge\n\t}\n}", "forward signature edge needs at least one secret (whsec_…), at Testfile:3"},
		{"a secret for keep", "webhook_idempotency stripe {\n\tforward {\n\t\tsignature keep whsec_a\n\t}\n}", "forward signature keep takes no secret, at Testfile:3"},
		{"a header without a value", "webhook_idempotency stripe {\n\tforward {\n\t\theader X-A\n\t}\n}", "forward header takes a name and a value, got 1 values, at Testfile:3"},
		{"a header the module sets", "webhook_idempotency stripe {\n\tforward {\n\t\theader Idempotency-Key x\n\t}\n}", "forward header 'Idempotency-Key' is set by the module itself, at Testfile:3"},
		{"unknown", "webhook_idempotency stripe {\n\tforward {\n\t\tsign x\n\t}\n}", "unrecognized forward subdirective 'sign', at Testfile:3"},
		{"twice", "webhook_idempotency stripe {\n\tforward {\n\t}\n\tforward {\n\t}\n}", "forward given twice, at Testfile:4"},
		{"inbox tls unknown", "webhook_idempotency {\n\tsource s\n\tinbox http://app {\n\t\ttls {\n\t\t\tcert x\n\t\t}\n\t}\n}", "unrecognized inbox tls subdirective 'cert', at Testfile:5"},
		{"inbox tls client_cert without a key", "webhook_idempotency {\n\tsource s\n\tinbox http://app {\n\t\ttls {\n\t\t\tclient_cert c.pem\n\t\t}\n\t}\n}", "inbox tls 'client_cert' takes a certificate file and a key file, got 1 values, at Testfile:5"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

// TestForwardDefaults: inbox deliveries are re-signed where the scheme
// can be, the next handler keeps the signature; resign on a scheme that
// cannot is refused, suggesting edge.
func TestForwardDefaults(t *testing.T) {
	for _, tc := range []struct {
		h          Handler
		now, later forward.Mode
	}{
		{Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_x"}}}, forward.Keep, forward.Resign},
		{Handler{Provider: "slack", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}}, forward.Keep, forward.Resign},
		{Handler{Provider: "discord", Verify: &providers.VerifyConfig{PublicKeys: []string{"a3b5e6a4ec5e8a9b7f1d3d5b6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f"}}}, forward.Keep, forward.Keep},
		{Handler{Provider: "asaas", Verify: &providers.VerifyConfig{Secrets: []string{"tok"}}}, forward.Keep, forward.Keep},
		{Handler{Source: "none"}, forward.Keep, forward.Keep},
		{Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_x"}}, Forward: &ForwardConfig{Signature: "strip"}}, forward.Strip, forward.Strip},
	} {
		h := newTestHandler(t, &tc.h)
		if h.fwd.now.Mode() != tc.now || h.fwd.later.Mode() != tc.later {
			t.Errorf("%s: now %s later %s, want %s %s", h.Source, h.fwd.now.Mode(), h.fwd.later.Mode(), tc.now, tc.later)
		}
	}
	h := &Handler{Provider: "asaas", Verify: &providers.VerifyConfig{Secrets: []string{"tok"}}, Forward: &ForwardConfig{Signature: "resign"}}
	if err := provisionErr(t, h); err == nil || !strings.Contains(err.Error(), "cannot be re-signed") || !strings.Contains(err.Error(), "signature edge") {
		t.Fatalf("resign on a token scheme: %v", err)
	}
}

// TestForwardToTheNextHandler: in dedup mode the next handler gets what the
// route forwards (here a Standard Webhooks signature of the edge's, the
// provider's signature removed, an outbound header), verified by the
// Standard Webhooks library; the request as received is untouched for the
// archive's sake.
func TestForwardToTheNextHandler(t *testing.T) {
	const edge = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	t.Setenv("WEBHOOK_TEST_APP_TOKEN", "tok-1")
	h := newTestHandler(t, &Handler{
		Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_stripe"}},
		StoreRaw: json.RawMessage(`{"module":"memory"}`),
		Forward: &ForwardConfig{Signature: "edge", EdgeSecrets: []string{edge},
			Headers: map[string]string{"X-App-Token": "{env.WEBHOOK_TEST_APP_TOKEN}"}},
	})
	wh, err := standardwebhooks.NewWebhook(edge)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_fwd_1","object":"event"}`)
	r := signedStripe(t, body)
	r.Header.Set("Webhook-Signature", "v1,forged")
	original := r.Header.Get("Stripe-Signature")
	got, gotBody := forwardedNow(t, h, r)
	if err := wh.Verify(gotBody, got); err != nil {
		t.Fatalf("the Standard Webhooks library refused what the next handler got: %v (%v)", err, got)
	}
	if got.Get("Stripe-Signature") != "" || got.Get("X-App-Token") != "tok-1" || got.Get("webhook-id") != "evt_fwd_1" || got.Get(forward.SourceHeader) != "stripe" {
		t.Fatalf("next handler's headers: %v", got)
	}
	if r.Header.Get("Stripe-Signature") != original || r.Header.Get("X-App-Token") != "" {
		t.Fatalf("the request as received changed: %v", r.Header)
	}
}

// TestForwardEdgeSignsWithEverySecret: with two edge secrets (a rotation),
// the application gets both signatures in one webhook-signature header,
// and a Standard Webhooks library holding either secret accepts it.
func TestForwardEdgeSignsWithEverySecret(t *testing.T) {
	edges := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"}
	h := newTestHandler(t, &Handler{
		Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_stripe"}},
		StoreRaw: json.RawMessage(`{"module":"memory"}`),
		Forward:  &ForwardConfig{Signature: "edge", EdgeSecrets: edges},
	})
	body := []byte(`{"id":"evt_fwd_2","object":"event"}`)
	got, gotBody := forwardedNow(t, h, signedStripe(t, body))
	if sigs := strings.Fields(got.Get("webhook-signature")); len(sigs) != 2 || sigs[0] == sigs[1] {
		t.Fatalf("webhook-signature %q: want two signatures, one per secret", got.Get("webhook-signature"))
	}
	for _, secret := range edges {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(gotBody, got); err != nil {
			t.Errorf("the Standard Webhooks library with %s refused it: %v", secret[:12], err)
		}
	}
}

// signedStripe is a request to /stripe carrying body, signed as Stripe
// signs with the secret whsec_stripe.
func signedStripe(t *testing.T, body []byte) *http.Request {
	t.Helper()
	signer, _ := providers.NewSigner("stripe", providers.SignConfig{Secret: "whsec_stripe"})
	r := httptest.NewRequest(http.MethodPost, "/stripe", bytes.NewReader(body))
	if _, err := signer.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r
}

// forwardedNow serves r as a new delivery and returns the headers and the
// body the next handler got.
func forwardedNow(t *testing.T, h *Handler, r *http.Request) (http.Header, []byte) {
	t.Helper()
	var got http.Header
	var gotBody []byte
	res := serveReq(h, r, func(w http.ResponseWriter, r *http.Request) error {
		got = r.Header.Clone()
		gotBody, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
		return nil
	})
	if res.result != results.New {
		t.Fatalf("result %q: %s", res.result, res.w.Body)
	}
	return got, gotBody
}

// githubBlocked is a GitHub delivery with id, signed with gh-secret, whose
// body (an org_block event) carries no id of its own, with the headers
// given as name, value pairs: its signed bytes are the same under every id.
func githubBlocked(t *testing.T, id string, headers ...string) *http.Request {
	t.Helper()
	signer, err := providers.NewSigner("github", providers.SignConfig{Secret: "gh-secret"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"action":"blocked","blocked_user":{"login":"octocat"}}`)
	r := httptest.NewRequest(http.MethodPost, "/github", bytes.NewReader(body))
	if _, err := signer.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	r.Header.Set("X-GitHub-Delivery", id)
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

// TestForwardEdgeDropsWebhookHeadersFromOutside: with `edge`, no webhook-*
// header that came with the request reaches the application, not even
// one named like a header the module sets (Webhook-Attempt,
// Webhook-Replay-Suspected, Webhook-Order-Broken); the module's own
// Webhook-Replay-Suspected, for signed bytes seen under another id,
// still does.
func TestForwardEdgeDropsWebhookHeadersFromOutside(t *testing.T) {
	const edge = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	h := newTestHandler(t, &Handler{
		Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"gh-secret"}},
		StoreRaw: json.RawMessage(`{"module":"memory"}`),
		Forward:  &ForwardConfig{Signature: "edge", EdgeSecrets: []string{edge}},
	})
	delivery := func(id string) *http.Request {
		return githubBlocked(t, id, "Webhook-Attempt", "99", "Webhook-Replay-Suspected", "forged",
			"Webhook-Order-Broken", "forged", "Webhook-Custom", "forged")
	}
	got, _ := forwardedNow(t, h, delivery("d-1"))
	for _, name := range []string{"Webhook-Attempt", "Webhook-Replay-Suspected", "Webhook-Order-Broken", "Webhook-Custom"} {
		if v := got.Values(name); len(v) > 0 {
			t.Errorf("the application got %s %q from outside", name, v)
		}
	}
	if got.Get("webhook-id") != "d-1" {
		t.Fatalf("webhook-id %q, want d-1", got.Get("webhook-id"))
	}
	// the same signed bytes under another id: the module says so
	got, _ = forwardedNow(t, h, delivery("d-2"))
	if v := got.Values("Webhook-Replay-Suspected"); len(v) != 1 || v[0] != "d-1" {
		t.Fatalf("Webhook-Replay-Suspected %q, want the first delivery's key d-1", v)
	}
	if v := got.Values("Webhook-Attempt"); len(v) > 0 {
		t.Errorf("the application got Webhook-Attempt %q from outside", v)
	}
}

// TestForwardReplaySuspectedIsTheModules: Webhook-Replay-Suspected is the
// module's to say in every forward mode: one that came from outside
// (keep, strip, the route's own headers) does not reach the application,
// the module's own does, and the one received is what the request came
// with (the archive keeps it).
func TestForwardReplaySuspectedIsTheModules(t *testing.T) {
	for _, fc := range []*ForwardConfig{nil, {Signature: "keep"}, {Signature: "strip"}, {Signature: "keep", Headers: map[string]string{"X-Route": "r"}}} {
		name := "default"
		if fc != nil {
			name = fc.Signature + fmt.Sprint(len(fc.Headers))
		}
		t.Run(name, func(t *testing.T) {
			h := newTestHandler(t, &Handler{
				Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"gh-secret"}},
				StoreRaw: json.RawMessage(`{"module":"memory"}`), Forward: fc,
			})
			delivery := func(id string) *http.Request {
				return githubBlocked(t, id, "Webhook-Replay-Suspected", "forged")
			}
			first := delivery("d-1")
			got, _ := forwardedNow(t, h, first)
			if v := got.Values("Webhook-Replay-Suspected"); len(v) > 0 {
				t.Errorf("the application got Webhook-Replay-Suspected %q from outside", v)
			}
			if got.Get("X-GitHub-Delivery") != "d-1" {
				t.Errorf("the provider's headers: X-GitHub-Delivery %q", got.Get("X-GitHub-Delivery"))
			}
			if v := first.Header.Values("Webhook-Replay-Suspected"); len(v) != 1 || v[0] != "forged" {
				t.Errorf("the request as received: Webhook-Replay-Suspected %q, want the sender's", v)
			}
			// the same signed bytes under another id: the module says so,
			// to the application only
			second := delivery("d-2")
			got, _ = forwardedNow(t, h, second)
			if v := got.Values("Webhook-Replay-Suspected"); len(v) != 1 || v[0] != "d-1" {
				t.Fatalf("Webhook-Replay-Suspected %q, want the first delivery's key d-1", v)
			}
			if v := second.Header.Values("Webhook-Replay-Suspected"); len(v) != 1 || v[0] != "forged" {
				t.Errorf("the second request as received: Webhook-Replay-Suspected %q, want the sender's", v)
			}
		})
	}
}

// TestForwardResignPolar: Polar signs as a Standard Webhooks sender with
// its whsec_ secret either decoded or used as written, depending on when
// the secret was made, so a re-signed delivery carries a signature under
// each key in its webhook-signature list: the Standard Webhooks library
// the application holds accepts it either way.
func TestForwardResignPolar(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	h := newTestHandler(t, &Handler{
		Provider: "polar", Verify: &providers.VerifyConfig{Secrets: []string{secret}},
		StoreRaw: json.RawMessage(`{"module":"memory"}`),
		Forward:  &ForwardConfig{Signature: "resign"},
	})
	decoded, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	asWritten, err := standardwebhooks.NewWebhookRaw([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for i, sender := range []*standardwebhooks.Webhook{decoded, asWritten} {
		body := []byte(fmt.Sprintf(`{"type":"order.paid","data":{"id":"ord_%d"}}`, i))
		id := fmt.Sprintf("msg_polar_%d", i)
		at := time.Now().Add(-time.Minute)
		sig, err := sender.Sign(id, at, body)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/polar", bytes.NewReader(body))
		r.Header.Set("webhook-id", id)
		r.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		r.Header.Set("webhook-signature", sig)
		got, gotBody := forwardedNow(t, h, r)
		if got.Get("webhook-timestamp") == strconv.FormatInt(at.Unix(), 10) {
			t.Errorf("delivery %d: not re-signed: webhook-timestamp %s", i, got.Get("webhook-timestamp"))
		}
		for name, app := range map[string]*standardwebhooks.Webhook{"decoded": decoded, "as written": asWritten} {
			if err := app.Verify(gotBody, got); err != nil {
				t.Errorf("delivery %d: the Standard Webhooks library with the key %s refused it: %v (%q)", i, name, err, got.Get("webhook-signature"))
			}
		}
	}
}
