package signature_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// stripeTemplate is Stripe's scheme written as a template over the
// parameters of one header: `Stripe-Signature: t=…,v1=…` over
// `{t}.{body}`.
func stripeTemplate(secret string) signature.TemplateConfig {
	return signature.TemplateConfig{
		String:    "{timestamp}.{body}",
		Algorithm: signature.HMACSHA256,
		Signature: signature.SignatureLocation{From: "header:Stripe-Signature", Param: "v1"},
		Timestamp: signature.TimestampLocation{From: "header:Stripe-Signature", Param: "t"},
		Secrets:   []string{secret},
	}
}

// TestTemplateParams: a signature and a timestamp read from the
// parameters of one header verify what stripe-go signs (a `,` list) and
// Paddle's published example (a `;` list); every item of the signature's
// name is a candidate, items of other names are ignored, and the
// timestamp is the first item of its name.
func TestTemplateParams(t *testing.T) {
	const secret = "whsec_params"
	v, err := signature.NewTemplate(stripeTemplate(secret))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_params","object":"event"}`)
	at := time.Now()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	req := func(header string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Stripe-Signature", header)
		return r
	}
	sigtest.WantReason(t, v.Verify(req(signed.Header), body), nil)
	sigtest.WantReason(t, v.Verify(req(signed.Header), append(body, ' ')), signature.ErrInvalid)

	ts := strconv.FormatInt(at.Unix(), 10)
	good := signed.Header[strings.Index(signed.Header, "v1=")+3:]
	wrong := sigtest.HMACHex("other", ts, ".", string(body))
	for _, tc := range []struct {
		name, header string
		want         *signature.Error
	}{
		{"a v1 among others, spaces and a v0", "t=" + ts + " , v1=" + wrong + ",v0=" + good + ", v1=" + good, nil},
		{"a `;` list", "t=" + ts + ";v1=" + good, nil},
		{"the first t counts", "t=" + ts + ",t=1,v1=" + good, nil},
		{"only a v0", "t=" + ts + ",v0=" + good, signature.ErrInvalid},
		{"no v1 of the secret", "t=" + ts + ",v1=" + wrong, signature.ErrInvalid},
		{"another parameter's name", "t=" + ts + ",xv1=" + good, signature.ErrInvalid},
		{"no t", "v1=" + good, signature.ErrMissing},
		{"an empty t", "t=,v1=" + good, signature.ErrMissing},
		{"a t that is no number", "t=x" + ts + ",v1=" + good, signature.ErrInvalid},
		{"the signature over another t", "t=" + strconv.FormatInt(at.Unix()+1, 10) + ",v1=" + good, signature.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigtest.WantReason(t, v.Verify(req(tc.header), body), tc.want)
		})
	}

	stale := at.Add(-10 * time.Minute)
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: stale})
	sigtest.WantReason(t, v.Verify(req(old.Header), body), signature.ErrTimestamp)

	// Paddle's `ts=…;h1=…` over `{ts}:{body}`: the example of Paddle's Go
	// SDK (example_webhook_verifier_test.go)
	signature.SetClock(t, time.Unix(1710929255, 0).Add(time.Minute))
	paddle, err := signature.NewTemplate(signature.TemplateConfig{
		String:    "{timestamp}:{body}",
		Algorithm: signature.HMACSHA256,
		Signature: signature.SignatureLocation{From: "header:Paddle-Signature", Param: "h1"},
		Timestamp: signature.TimestampLocation{From: "header:Paddle-Signature", Param: "ts"},
		Secrets:   []string{"pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr"},
	})
	if err != nil {
		t.Fatal(err)
	}
	paddleBody := []byte(`{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`)
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Paddle-Signature", "ts=1710929255;h1=6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8")
	sigtest.WantReason(t, paddle.Verify(r, paddleBody), nil)
	sigtest.WantReason(t, paddle.Verify(r, append(paddleBody, ' ')), signature.ErrInvalid)
}

// TestTemplateParamsSigner: the signer writes the timestamp and the
// signature as one list when they share a header, which stripe-go's
// webhook.ValidatePayload accepts, and as a parameter each in two
// headers.
func TestTemplateParamsSigner(t *testing.T) {
	const secret = "whsec_signer"
	cfg := stripeTemplate(secret)
	s, err := signature.NewTemplateSigner(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_signer","object":"event"}`)
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Stripe-Signature", "t=1,v1=stale")
	if _, err := s.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	h := r.Header.Get("Stripe-Signature")
	if !strings.HasPrefix(h, "t=") || strings.Count(h, "v1=") != 1 {
		t.Fatalf("signed header %q", h)
	}
	if err := webhook.ValidatePayload(body, h, secret); err != nil {
		t.Fatalf("stripe-go refuses %q: %v", h, err)
	}

	cfg.Timestamp = signature.TimestampLocation{From: "header:X-Time", Param: "t"}
	cfg.Signature = signature.SignatureLocation{From: "header:X-Sig", Param: "sig", Prefix: "hex:"}
	s, err = signature.NewTemplateSigner(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", nil)
	at := time.Unix(1800000000, 0)
	if _, err := s.Sign(r, body, at); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get("X-Time"); got != "t=1800000000" {
		t.Fatalf("X-Time %q", got)
	}
	if got, want := r.Header.Get("X-Sig"), "sig=hex:"+sigtest.HMACHex(secret, "1800000000", ".", string(body)); got != want {
		t.Fatalf("X-Sig %q, want %q", got, want)
	}
	signature.SetClock(t, at)
	v, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sigtest.WantReason(t, v.Verify(r, body), nil)
}

// TestTemplateParamsConfig: {timestamp} needs a timestamp, a param needs
// a name that can be one, and a timestamp's param needs a timestamp.
func TestTemplateParamsConfig(t *testing.T) {
	base := func() signature.TemplateConfig { return stripeTemplate("k") }
	for _, tc := range []struct {
		name string
		edit func(*signature.TemplateConfig)
		want string
	}{
		{"{timestamp} without a timestamp", func(c *signature.TemplateConfig) { c.Timestamp = signature.TimestampLocation{} }, "string: {timestamp} needs a timestamp"},
		{"a param with a comma", func(c *signature.TemplateConfig) { c.Signature.Param = "v1,t" }, "signature: param"},
		{"a param with =", func(c *signature.TemplateConfig) { c.Timestamp.Param = "t=" }, "timestamp: param"},
		{"a param without a timestamp", func(c *signature.TemplateConfig) {
			c.String = "{body}"
			c.Timestamp = signature.TimestampLocation{Param: "t"}
		}, "timestamp: a unit or a param without a timestamp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.edit(&cfg)
			_, err := signature.NewTemplate(cfg)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error starting %q", err, tc.want)
			}
		})
	}
}
