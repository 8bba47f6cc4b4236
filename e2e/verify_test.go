package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func stripeHeader(secret string, body []byte, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at}).Header
}

func TestE2EVerifyForgedDeliveriesNeverReachUpstream(t *testing.T) {
	t.Setenv("WEBHOOK_TEST_STRIPE_SECRET", "whsec_e2e_secret")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency stripe {
		secret {env.WEBHOOK_TEST_STRIPE_SECRET}
	}
	reverse_proxy %s
}`, port, up.Addr()))
	url := testkit.SiteURL(port) + "/stripe"
	body := []byte(`{"id":"evt_e2e_1","type":"invoice.paid"}`)

	resp, rb := testkit.Post(t, url, body, "Stripe-Signature", stripeHeader("whsec_forged", body, time.Now()))
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = testkit.Post(t, url, body)
	wantRejected(t, resp, rb, "missing signature")
	resp, rb = testkit.Post(t, url, body, "Stripe-Signature", stripeHeader("whsec_e2e_secret", body, time.Now().Add(-time.Hour)))
	wantRejected(t, resp, rb, "timestamp outside tolerance")
	tampered := []byte(`{"id":"evt_e2e_1","type":"invoice.paid" }`)
	resp, rb = testkit.Post(t, url, tampered, "Stripe-Signature", stripeHeader("whsec_e2e_secret", body, time.Now()))
	wantRejected(t, resp, rb, "invalid signature")
	if n := up.Calls.Load(); n != 0 {
		t.Fatalf("upstream called %d times by forged deliveries", n)
	}

	// none of them claimed the key: the genuine delivery is new
	first, firstBody := testkit.Post(t, url, body, "Stripe-Signature", stripeHeader("whsec_e2e_secret", body, time.Now()))
	if first.StatusCode != http.StatusOK || first.Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("genuine delivery: %d %v %s", first.StatusCode, first.Header, firstBody)
	}
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}

	// Stripe's retry is signed anew with a later timestamp: same event id,
	// so it is a duplicate
	retry, retryBody := testkit.Post(t, url, body, "Stripe-Signature", stripeHeader("whsec_e2e_secret", body, time.Now().Add(2*time.Second)))
	if retry.StatusCode != http.StatusOK || retry.Header.Get(testkit.ReplayedHeader) != "true" || string(retryBody) != string(firstBody) {
		t.Fatalf("retry: %d replayed=%q %s", retry.StatusCode, retry.Header.Get(testkit.ReplayedHeader), retryBody)
	}
	// a forged copy of the same event is still rejected, not replayed
	resp, rb = testkit.Post(t, url, body, "Stripe-Signature", stripeHeader("whsec_forged", body, time.Now()))
	wantRejected(t, resp, rb, "invalid signature")
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// A site on two ports is one route that Caddy places in two servers, each
// with a handler of the same configuration: one endpoint, whose preset
// source both share, so a delivery on one port and its retry on the other
// are one event. A second preset handler of another configuration is
// still refused, in the Caddyfile (TestCaddyfilePresetSourceAcrossRoutes)
// and in JSON.
func TestE2EPresetSiteOnTwoPorts(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	p1, p2 := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d, :%d {
	webhook_idempotency stripe {
		secret whsec_two_ports
	}
	reverse_proxy %s
}`, p1, p2, up.Addr()))
	body := []byte(`{"id":"evt_two_ports","type":"invoice.paid"}`)
	resp, rb := testkit.Post(t, testkit.SiteURL(p1)+"/stripe", body, "Stripe-Signature", stripeHeader("whsec_two_ports", body, time.Now()))
	testkit.WantNew(t, resp, rb, http.StatusOK)
	resp, rb = testkit.Post(t, testkit.SiteURL(p2)+"/stripe", body, "Stripe-Signature", stripeHeader("whsec_two_ports", body, time.Now().Add(time.Second)))
	testkit.WantReplay(t, resp, rb, http.StatusOK, `{"call":1}`)
	up.WantCalls(t, 1)

	// the same JSON with the second server's handler changed: two
	// endpoints on one preset source, refused
	cfg, err := testkit.AdaptConfig(t, "", fmt.Sprintf(`:%d, :%d {
	webhook_idempotency stripe {
		secret whsec_two_ports
	}
	reverse_proxy %s
}`, testkit.FreePort(t), testkit.FreePort(t), up.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(raw, []byte("whsec_two_ports"))
	if i < 0 || bytes.Index(raw, []byte("whsec_two_ports")) == i {
		t.Fatalf("want the handler in two servers: %s", raw)
	}
	raw = append(raw[:i:i], append([]byte("whsec_another"), raw[i+len("whsec_two_ports"):]...)...)
	var other caddy.Config
	if err := json.Unmarshal(raw, &other); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&other); err == nil || !strings.Contains(err.Error(), `the "stripe" preset is used without a 'source' by two webhook_idempotency handlers`) {
		t.Fatalf("two handlers of different configurations on the stripe preset's source: %v", err)
	}
}

func TestE2EVerifyGenericHMACRotation(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source acme
		key header:X-Delivery body
		verify hmac {
			header    X-Acme-Signature
			algorithm sha1
			encoding  hex
			prefix    sha1=
			secret    old-secret new-secret
		}
	}
	reverse_proxy %s
}`, port, up.Addr()))
	url := testkit.SiteURL(port) + "/acme"
	sign := func(secret string, body []byte) string {
		m := hmac.New(sha1.New, []byte(secret))
		m.Write(body)
		return "sha1=" + hex.EncodeToString(m.Sum(nil))
	}
	for i, secret := range []string{"old-secret", "new-secret"} {
		body := []byte(`{"n":` + strconv.Itoa(i) + `}`)
		resp, rb := testkit.Post(t, url, body, "X-Acme-Signature", sign(secret, body), "X-Delivery", "d-"+strconv.Itoa(i))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("signed with %s: %d %s", secret, resp.StatusCode, rb)
		}
	}
	body := []byte(`{"n":9}`)
	resp, rb := testkit.Post(t, url, body, "X-Acme-Signature", sign("retired-secret", body), "X-Delivery", "d-9")
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = testkit.Post(t, url, body, "X-Acme-Signature", "sha256="+sign("new-secret", body)[5:], "X-Delivery", "d-9")
	wantRejected(t, resp, rb, "invalid signature")
	if n := up.Calls.Load(); n != 2 {
		t.Fatalf("upstream called %d times, want 2", n)
	}
}

// Twilio signs the public URL; behind a proxy it is rebuilt from
// X-Forwarded-* only when the proxy is trusted.
func TestE2EVerifyTwilioForwardedURL(t *testing.T) {
	form := []byte("From=%2B14158675309&MessageSid=SM1&Body=hi")
	// sorted: Body, From, MessageSid
	signed := "https://hooks.example.com/sms?acct=1" + "Bodyhi" + "From+14158675309" + "MessageSidSM1"
	m := hmac.New(sha1.New, []byte("twilio-token"))
	m.Write([]byte(signed))
	sig := base64.StdEncoding.EncodeToString(m.Sum(nil))

	for _, c := range []struct {
		name    string
		globals string
		want    int
	}{
		{"untrusted", "", http.StatusUnauthorized},
		{"trusted", "servers {\n\t\ttrusted_proxies static private_ranges\n\t}", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, c.globals, fmt.Sprintf(`:%d {
	webhook_idempotency twilio {
		secret twilio-token
	}
	reverse_proxy %s
}`, port, up.Addr()))
			resp, rb := testkit.Post(t, testkit.SiteURL(port)+"/sms?acct=1", form,
				"Content-Type", "application/x-www-form-urlencoded",
				"X-Twilio-Signature", sig,
				"X-Forwarded-Proto", "https",
				"X-Forwarded-Host", "hooks.example.com",
				"I-Twilio-Idempotency-Token", "tok-1")
			if resp.StatusCode != c.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, rb, c.want)
			}
			wantCalls := int64(0)
			if c.want == http.StatusOK {
				wantCalls = 1
			}
			if n := up.Calls.Load(); n != wantCalls {
				t.Fatalf("upstream called %d times, want %d", n, wantCalls)
			}
		})
	}
}

// An empty signature header is a missing signature, for every scheme: the
// same 401 reason whether the header is absent or empty.
func TestE2EEmptySignatureHeaderIsMissing(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	handle /github {
		webhook_idempotency github {
			secret s
		}
		reverse_proxy %[2]s
	}
	handle /shopify {
		webhook_idempotency shopify {
			secret s
		}
		reverse_proxy %[2]s
	}
	handle /stripe {
		webhook_idempotency stripe {
			secret whsec_s
		}
		reverse_proxy %[2]s
	}
	handle /token {
		webhook_idempotency {
			source token
			verify token {
				header X-Token
				secret s
			}
		}
		reverse_proxy %[2]s
	}
}`, port, up.Addr()))
	for path, header := range map[string]string{
		"/github": "X-Hub-Signature-256", "/shopify": "X-Shopify-Hmac-Sha256",
		"/stripe": "Stripe-Signature", "/token": "X-Token",
	} {
		resp, body := testkit.Post(t, testkit.SiteURL(port)+path, []byte(`{"id":"evt_empty"}`))
		wantRejected(t, resp, body, "missing signature")
		resp, body = testkit.Post(t, testkit.SiteURL(port)+path, []byte(`{"id":"evt_empty"}`), header, "")
		if resp.StatusCode != http.StatusUnauthorized || string(body) != `{"error":"missing signature"}` {
			t.Errorf("%s with an empty %s: %d %s, want 401 missing signature", path, header, resp.StatusCode, body)
		}
	}
	up.WantCalls(t, 0)
}
