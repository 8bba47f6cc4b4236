package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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

// The template's values that hold more than a signature: `t=…,v1=…`
// parameters (WorkOS, Mux, Persona, and the Stripe-like schemes), a
// positional list (Recurly), sets verified one by one (Persona during a
// rotation), the {timestamp} field, and secrets that are not used as
// written (Standard Webhooks' whsec_, EasyPost's NFKD, both of Polar's
// forms). Signatures are made here with the standard library over strings
// written out by hand, and by stripe-go and Paddle's published example for
// the Stripe-like parameters (TestTemplateStripeParameters).

// paramsTemplate is `{timestamp}.{body}` signed with HMAC-SHA256 in hex,
// the signature and the timestamp both in the `Sig` header as `sig` and
// `ts` say.
func paramsTemplate(t *testing.T, sig signature.SignatureLocation, ts signature.TimestampLocation, edit ...func(*signature.TemplateConfig)) signature.Verifier {
	t.Helper()
	sig.From, ts.From = "header:Sig", "header:Sig"
	return hmacTemplate(t, `{timestamp}.{body}`, append([]func(*signature.TemplateConfig){func(c *signature.TemplateConfig) {
		c.Signature, c.Timestamp = sig, ts
	}}, edit...)...)
}

// sendSig verifies body with v under the Sig header's values.
func sendSig(t *testing.T, v signature.Verifier, body string, want *signature.Error, values ...string) {
	t.Helper()
	d := sigtest.NewDelivery("/", []byte(body), time.Time{})
	for _, val := range values {
		d.Req.Header.Add("Sig", val)
	}
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
}

// TestTemplateTimestampParameter checks `t=<ts>,v1=<sig>`: the timestamp
// taken out of the signature's header by its prefix, signed as sent
// through {timestamp}, checked against the tolerance; several v1 (any may
// match), other versions ignored, spaces around items as WorkOS writes
// them.
func TestTemplateTimestampParameter(t *testing.T) {
	signature.SetClock(t, templateNow)
	v := paramsTemplate(t,
		signature.SignatureLocation{Separator: ",", Prefix: "v1="},
		signature.TimestampLocation{Separator: ",", Prefix: "t=", Unit: "ms"})
	ts := strconv.FormatInt(templateNow.UnixMilli(), 10)
	body := `{"id":"event_1"}`
	good := signHMAC("k", ts+"."+body)
	sendSig(t, v, body, nil, "t="+ts+",v1="+good)
	sendSig(t, v, body, nil, "t="+ts+", v1="+good)
	sendSig(t, v, body, nil, "t="+ts+",v1="+signHMAC("other", ts+"."+body)+",v1="+good)
	sendSig(t, v, body, nil, "v0=ab,t="+ts+",v2=cd,v1="+good)
	// the timestamp signed is the one sent: another one does not match
	next := strconv.FormatInt(templateNow.UnixMilli()+1, 10)
	sendSig(t, v, body, signature.ErrInvalid, "t="+next+",v1="+good)
	sendSig(t, v, body, signature.ErrInvalid, "t="+ts+",v1="+signHMAC("k", body))
	sendSig(t, v, body, signature.ErrInvalid, "t="+ts+",v2="+good)
	sendSig(t, v, body, signature.ErrInvalid, "v1="+good)
	sendSig(t, v, body, signature.ErrMissing, " ")
	stale := strconv.FormatInt(templateNow.Add(-6*time.Minute).UnixMilli(), 10)
	sendSig(t, v, body, signature.ErrTimestamp, "t="+stale+",v1="+signHMAC("k", stale+"."+body))
	future := strconv.FormatInt(templateNow.Add(6*time.Minute).UnixMilli(), 10)
	sendSig(t, v, body, signature.ErrTimestamp, "t="+future+",v1="+signHMAC("k", future+"."+body))
}

// TestTemplateTimestampInItsOwnHeader checks {timestamp} and a prefix on a
// timestamp that has a header of its own.
func TestTemplateTimestampInItsOwnHeader(t *testing.T) {
	signature.SetClock(t, templateNow)
	v := hmacTemplate(t, `v1.{timestamp}.{body}`, func(c *signature.TemplateConfig) {
		c.Timestamp = signature.TimestampLocation{From: "header:Ts", Prefix: "ts="}
	})
	ts := strconv.FormatInt(templateNow.Unix(), 10)
	for _, c := range []struct {
		header string
		want   *signature.Error
	}{
		{"ts=" + ts, nil},
		{ts, signature.ErrInvalid},
		{"", signature.ErrMissing},
	} {
		d := sigtest.NewDelivery("/", []byte("{}"), time.Time{})
		if c.header != "" {
			d.Req.Header.Set("Ts", c.header)
		}
		d.Req.Header.Set("X-Sig", signHMAC("k", "v1."+ts+".{}"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
	}
}

// TestTemplatePositionalList checks Recurly's `<timestamp>,<sig>[,<sig>]`:
// the timestamp is the first item, the signatures the items after it.
func TestTemplatePositionalList(t *testing.T) {
	signature.SetClock(t, templateNow)
	v := paramsTemplate(t,
		signature.SignatureLocation{Separator: ",", Skip: 1},
		signature.TimestampLocation{Separator: ",", Unit: "ms"},
		func(c *signature.TemplateConfig) { c.Secrets = []string{"old", "new"} })
	ts := strconv.FormatInt(templateNow.UnixMilli(), 10)
	body := `{"id":"rjxwmwedwqug"}`
	sendSig(t, v, body, nil, ts+","+signHMAC("new", ts+"."+body))
	sendSig(t, v, body, nil, ts+","+signHMAC("other", ts+"."+body)+","+signHMAC("old", ts+"."+body))
	sendSig(t, v, body, signature.ErrInvalid, ts+","+signHMAC("other", ts+"."+body))
	// the first item is never a signature, whatever it holds
	sendSig(t, v, body, signature.ErrInvalid, signHMAC("new", ts+"."+body))
	sendSig(t, v, body, signature.ErrInvalid, ts)
	stale := strconv.FormatInt(templateNow.Add(-time.Hour).UnixMilli(), 10)
	sendSig(t, v, body, signature.ErrTimestamp, stale+","+signHMAC("new", stale+"."+body))
}

// TestTemplateSets checks Persona's rotation: `t=…,v1=… t=…,v1=…`, each
// set verified with its own timestamp; one authentic set is enough. The
// failure of every set says the worst: a signature that did not match,
// then a timestamp outside the tolerance.
func TestTemplateSets(t *testing.T) {
	signature.SetClock(t, templateNow)
	v := paramsTemplate(t,
		signature.SignatureLocation{Sets: " ", Separator: ",", Prefix: "v1="},
		signature.TimestampLocation{Separator: ",", Prefix: "t="})
	body := `{"data":{"id":"evt_1"}}`
	set := func(key string, at time.Time) string {
		ts := strconv.FormatInt(at.Unix(), 10)
		return "t=" + ts + ",v1=" + signHMAC(key, ts+"."+body)
	}
	fresh, stale := templateNow.Add(-time.Second), templateNow.Add(-time.Hour)
	sendSig(t, v, body, nil, set("k", fresh))
	sendSig(t, v, body, nil, set("old", fresh)+" "+set("k", fresh.Add(-time.Second)))
	sendSig(t, v, body, nil, set("k", stale)+" "+set("k", fresh))
	sendSig(t, v, body, nil, set("other", fresh), set("k", fresh))
	// a timestamp of one set does not stand for another's
	mixed := "t=" + strconv.FormatInt(stale.Unix(), 10) + ",v1=" + strings.TrimPrefix(set("k", fresh), "t="+strconv.FormatInt(fresh.Unix(), 10)+",v1=")
	sendSig(t, v, body, signature.ErrTimestamp, mixed)
	sendSig(t, v, body, signature.ErrInvalid, set("old", fresh)+" "+set("other", fresh))
	sendSig(t, v, body, signature.ErrInvalid, set("k", stale)+" "+set("other", fresh))
	sendSig(t, v, body, signature.ErrTimestamp, set("k", stale)+" "+set("k", stale))
	sendSig(t, v, body, signature.ErrInvalid, "v1=abc")
	sendSig(t, v, body, signature.ErrMissing, "  ")
	// at most 4 sets are looked at
	sendSig(t, v, body, signature.ErrInvalid, strings.Repeat(set("other", fresh)+" ", 4)+set("k", fresh))
}

// TestTemplateSecretEncodings checks the secrets that are not used as
// written: Standard Webhooks' whsec_ (the prefix optional), EasyPost's
// NFKD, and several encodings at once, each a key (Polar's secrets: the
// older ones used as written, whsec_ included, the newer ones decoded).
func TestTemplateSecretEncodings(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(key)
	macOf := func(k []byte) string {
		m := hmac.New(sha256.New, k)
		m.Write([]byte("payload"))
		return hex.EncodeToString(m.Sum(nil))
	}
	for _, c := range []struct {
		name, encoding, secret string
		accepted, refused      [][]byte
	}{
		{"whsec", "whsec", whsec, [][]byte{key}, [][]byte{[]byte(whsec)}},
		{"whsec without its prefix", "whsec", strings.TrimPrefix(whsec, "whsec_"), [][]byte{key}, nil},
		// é as e and a combining acute accent: the form EasyPost signs with
		{"nfkd", "nfkd", "s\u00e9cret", [][]byte{[]byte("se\u0301cret")}, [][]byte{[]byte("s\u00e9cret")}},
		{"nfkd of a compatibility character", "nfkd", "\ufb01le", [][]byte{[]byte("file")}, [][]byte{[]byte("\ufb01le")}},
		{"whsec or raw", "whsec raw", whsec, [][]byte{key, []byte(whsec)}, nil},
		{"raw or whsec, a secret that is no base64", "raw whsec", "whsec_not-base64!", [][]byte{[]byte("whsec_not-base64!")}, [][]byte{key}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := hmacTemplate(t, `{body}`, func(cfg *signature.TemplateConfig) {
				cfg.Secrets, cfg.SecretEncoding = []string{c.secret}, c.encoding
			})
			for i, k := range append(c.accepted, c.refused...) {
				d := sigtest.NewDelivery("/", []byte("payload"), time.Time{})
				d.Req.Header.Set("X-Sig", macOf(k))
				want := (*signature.Error)(nil)
				if i >= len(c.accepted) {
					want = signature.ErrInvalid
				}
				sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
			}
		})
	}
	// a secret that decodes under no encoding given is an error that does
	// not quote it
	_, err := signature.NewTemplate(signature.TemplateConfig{String: "{body}", Algorithm: "hmac-sha256",
		Signature: signature.SignatureLocation{From: "header:X"}, Secrets: []string{"whsec_%%%"}, SecretEncoding: "whsec hex"})
	if err == nil || err.Error() != "secret 1: not whsec nor hex" {
		t.Fatalf("error %v", err)
	}
}

// TestTemplateSignerParameters checks that the signer writes what the
// verifier reads: the timestamp's item first in the signature's header
// (`t=…,v1=…`, Recurly's `<t>,<sig>`, one of Persona's sets), the
// {timestamp} signed as written, and the first secret under each of
// several encodings, one signature per key where the header lists them
// (one set: the first key alone).
func TestTemplateSignerParameters(t *testing.T) {
	signature.SetClock(t, templateNow)
	ts := strconv.FormatInt(templateNow.UnixMilli(), 10)
	for _, c := range []struct {
		name  string
		sig   signature.SignatureLocation
		ts    signature.TimestampLocation
		wrote string
		also  string // the signature under the second key, when listed
	}{
		{"parameters", signature.SignatureLocation{Separator: ",", Prefix: "v1="}, signature.TimestampLocation{Separator: ",", Prefix: "t=", Unit: "ms"}, "t=" + ts + ",v1=", ",v1="},
		{"positional", signature.SignatureLocation{Separator: ",", Skip: 1}, signature.TimestampLocation{Separator: ",", Unit: "ms"}, ts + ",", ","},
		{"sets", signature.SignatureLocation{Sets: " ", Separator: ",", Prefix: "v1="}, signature.TimestampLocation{Separator: ",", Prefix: "t=", Unit: "ms"}, "t=" + ts + ",v1=", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.sig.From, c.ts.From = "header:Sig", "header:Sig"
			cfg := signature.TemplateConfig{String: "{timestamp}.{body}", Algorithm: "hmac-sha256", Signature: c.sig, Timestamp: c.ts,
				Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("key")), "second"}, SecretEncoding: "whsec raw"}
			v, err := signature.NewTemplate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := signature.NewTemplateSigner(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := sigtest.NewDelivery("/", []byte(`{"id":"1"}`), time.Time{})
			body, err := s.Sign(d.Req, d.Body, templateNow)
			if err != nil {
				t.Fatal(err)
			}
			want := c.wrote + signHMAC("key", ts+`.{"id":"1"}`)
			if c.also != "" {
				want += c.also + signHMAC(cfg.Secrets[0], ts+`.{"id":"1"}`)
			}
			if got := d.Req.Header.Get("Sig"); got != want {
				t.Fatalf("wrote %q, want %q", got, want)
			}
			sigtest.WantReason(t, v.Verify(d.Req, body), nil)
		})
	}
	// items before the signature that are not the timestamp cannot be written
	_, err := signature.NewTemplateSigner(signature.TemplateConfig{String: "{body}", Algorithm: "hmac-sha256", Secrets: []string{"k"},
		Signature: signature.SignatureLocation{From: "header:Sig", Separator: ",", Skip: 1}}, nil)
	if err == nil {
		t.Fatal("a signer skipping an item it cannot write")
	}
}

// TestTemplateParameterErrors checks the rules of the new options: each
// error starts with the option's name.
func TestTemplateParameterErrors(t *testing.T) {
	ok := func() signature.TemplateConfig {
		return signature.TemplateConfig{String: "{timestamp}.{body}", Algorithm: "hmac-sha256", Secrets: []string{"s"},
			Signature: signature.SignatureLocation{From: "header:Sig", Separator: ",", Prefix: "v1="},
			Timestamp: signature.TimestampLocation{From: "header:Sig", Separator: ",", Prefix: "t="}}
	}
	for _, c := range []struct {
		name, option string
		edit         func(*signature.TemplateConfig)
	}{
		{"timestamp field without a timestamp", "string:", func(c *signature.TemplateConfig) { c.Timestamp = signature.TimestampLocation{} }},
		{"a timestamp's prefix without a timestamp", "timestamp:", func(c *signature.TemplateConfig) {
			c.String, c.Timestamp = "{body}", signature.TimestampLocation{Prefix: "t="}
		}},
		{"a timestamp's separator without a timestamp", "timestamp:", func(c *signature.TemplateConfig) {
			c.String, c.Timestamp = "{body}", signature.TimestampLocation{Separator: ","}
		}},
		{"negative skip", "signature:", func(c *signature.TemplateConfig) { c.Signature.Skip = -1 }},
		{"skip without separator", "signature:", func(c *signature.TemplateConfig) {
			c.Signature = signature.SignatureLocation{From: "header:X", Skip: 1}
		}},
		{"sets in the body", "signature:", func(c *signature.TemplateConfig) {
			c.Signature.From, c.Signature.Sets = "json:sig", " "
		}},
		{"sets equal to the separator", "signature:", func(c *signature.TemplateConfig) { c.Signature.Sets = "," }},
		{"shared header without separator", "timestamp:", func(c *signature.TemplateConfig) { c.Timestamp.Separator = "" }},
		{"shared header, another separator", "timestamp:", func(c *signature.TemplateConfig) { c.Timestamp.Separator = ";" }},
		{"shared header, nothing tells the timestamp", "timestamp:", func(c *signature.TemplateConfig) { c.Timestamp.Prefix = "v1=" }},
		{"secret encoding twice", "secret_encoding", func(c *signature.TemplateConfig) { c.SecretEncoding = "raw raw" }},
		{"unknown secret encoding among others", "secret_encoding", func(c *signature.TemplateConfig) { c.SecretEncoding = "whsec nfkc" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok()
			c.edit(&cfg)
			_, err := signature.NewTemplate(cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), c.option) {
				t.Fatalf("error %q does not start with %q", err, c.option)
			}
		})
	}
	if _, err := signature.NewTemplate(ok()); err != nil {
		t.Fatalf("the base configuration: %v", err)
	}
}

// stripeTemplate is Stripe's scheme written as a template over the items
// of one header: `Stripe-Signature: t=…,v1=…` over `{t}.{body}`, as the
// calendly preset is declared.
func stripeTemplate(secret string) signature.TemplateConfig {
	return signature.TemplateConfig{
		String:    "{timestamp}.{body}",
		Algorithm: signature.HMACSHA256,
		Signature: signature.SignatureLocation{From: "header:Stripe-Signature", Separator: ",", Prefix: "v1="},
		Timestamp: signature.TimestampLocation{From: "header:Stripe-Signature", Separator: ",", Prefix: "t="},
		Secrets:   []string{secret},
	}
}

// TestTemplateStripeParameters: a signature and a timestamp read from the
// items of one header verify what stripe-go signs (a `,` list) and
// Paddle's published example (a `;` list, Separator ";"); every item with
// the signature's prefix is a candidate, other items are ignored, and the
// timestamp is the first item with its prefix.
func TestTemplateStripeParameters(t *testing.T) {
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
		{"the first t counts", "t=" + ts + ",t=1,v1=" + good, nil},
		// Stripe-Signature's items are separated by `,` only (stripe-go
		// splits at ","): a `;` list is one item, no timestamp
		{"a `;` list", "t=" + ts + ";v1=" + good, signature.ErrInvalid},
		{"only a v0", "t=" + ts + ",v0=" + good, signature.ErrInvalid},
		{"no v1 of the secret", "t=" + ts + ",v1=" + wrong, signature.ErrInvalid},
		{"another item's name", "t=" + ts + ",xv1=" + good, signature.ErrInvalid},
		// a header without its timestamp is malformed, as stripe-go's
		// ErrInvalidHeader says
		{"no t", "v1=" + good, signature.ErrInvalid},
		{"an empty t", "t=,v1=" + good, signature.ErrInvalid},
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
		Signature: signature.SignatureLocation{From: "header:Paddle-Signature", Separator: ";", Prefix: "h1="},
		Timestamp: signature.TimestampLocation{From: "header:Paddle-Signature", Separator: ";", Prefix: "ts="},
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

// TestTemplateStripeSigner: the signer writes the timestamp and the
// signature as one list when they share a header, which stripe-go's
// webhook.ValidatePayload accepts, and each with its prefix in two
// headers.
func TestTemplateStripeSigner(t *testing.T) {
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

	cfg.Timestamp = signature.TimestampLocation{From: "header:X-Time", Prefix: "t="}
	cfg.Signature = signature.SignatureLocation{From: "header:X-Sig", Prefix: "sig=hex:"}
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
