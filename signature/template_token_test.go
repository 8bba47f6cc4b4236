package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// A token template compares the value where its signature is with the
// secrets, as they are written: in a header after a prefix, in the query,
// or in each item of a batch (Microsoft Graph's clientState).
func TestTemplateToken(t *testing.T) {
	newToken := func(t *testing.T, cfg signature.TemplateConfig) signature.Verifier {
		t.Helper()
		cfg.Algorithm, cfg.Secrets = signature.Token, []string{"old-token", "new-token"}
		v, err := signature.NewTemplate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("header", func(t *testing.T) {
		v := newToken(t, signature.TemplateConfig{Signature: signature.SignatureLocation{From: "header:Authorization", Prefix: "Bearer "}})
		for _, c := range []struct {
			value string
			want  *signature.Error
		}{
			{"Bearer new-token", nil},
			{"Bearer old-token", nil},
			{"Bearer new-token ", nil}, // white space around a value is not part of it
			{"new-token", signature.ErrInvalid},
			{"Bearer new-tokem", signature.ErrInvalid},
			{"Bearer new-token2", signature.ErrInvalid},
			{"Bearer ", signature.ErrInvalid},
		} {
			d := sigtest.NewDelivery("/graph", []byte(`{}`), time.Time{})
			d.Req.Header.Set("Authorization", c.value)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
		}
		d := sigtest.NewDelivery("/graph", []byte(`{}`), time.Time{})
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)
	})
	t.Run("query", func(t *testing.T) {
		v := newToken(t, signature.TemplateConfig{Signature: signature.SignatureLocation{From: "query:code"}})
		for target, want := range map[string]*signature.Error{
			"/eg?code=new-token":       nil,
			"/eg?code=new%2Dtoken&x=1": nil,
			"/eg?code=other":           signature.ErrInvalid,
			"/eg?x=new-token":          signature.ErrMissing,
		} {
			d := sigtest.NewDelivery(target, []byte(`[]`), time.Time{})
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
		}
	})
	t.Run("each item", func(t *testing.T) {
		v := newToken(t, signature.TemplateConfig{Items: "json:value.#", Signature: signature.SignatureLocation{From: "json:clientState"}})
		item := func(state string) string {
			return `{"subscriptionId":"s1","changeType":"created","resource":"Users/1","clientState":` + state + `}`
		}
		for name, c := range map[string]struct {
			body string
			want *signature.Error
		}{
			"one":                  {`{"value":[` + item(`"new-token"`) + `]}`, nil},
			"rotation":             {`{"value":[` + item(`"new-token"`) + `,` + item(`"old-token"`) + `]}`, nil},
			"escaped":              {`{"value":[` + item(`"new\u002dtoken"`) + `]}`, nil},
			"one wrong":            {`{"value":[` + item(`"new-token"`) + `,` + item(`"guess"`) + `]}`, signature.ErrInvalid},
			"one without":          {`{"value":[` + item(`"new-token"`) + `,{"subscriptionId":"s2"}]}`, signature.ErrMissing},
			"not a string":         {`{"value":[` + item(`true`) + `]}`, signature.ErrInvalid},
			"no items":             {`{"value":[]}`, signature.ErrMissing},
			"given twice":          {`{"value":[{"clientState":"guess","clientState":"new-token"}]}`, signature.ErrAmbiguous},
			"outside of the items": {`{"clientState":"new-token","value":[{"clientState":"guess"}]}`, signature.ErrInvalid},
		} {
			t.Run(name, func(t *testing.T) {
				d := sigtest.NewDelivery("/graph", []byte(c.body), time.Time{})
				sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
			})
		}
	})
	for name, c := range map[string]struct {
		option string
		cfg    signature.TemplateConfig
	}{
		"a string":        {"string:", signature.TemplateConfig{String: "{body}"}},
		"a timestamp":     {"timestamp:", signature.TemplateConfig{Timestamp: signature.TimestampLocation{From: "header:T"}}},
		"an encoding":     {"signature:", signature.TemplateConfig{Signature: signature.SignatureLocation{From: "header:X", Encoding: "hex"}}},
		"a public key":    {"public_key:", signature.TemplateConfig{PublicKeys: []string{sigtest.PEMPublic(&sigtest.RSAKey("t").PublicKey)}}},
		"no secret":       {"secret:", signature.TemplateConfig{Secrets: []string{}}},
		"secret_encoding": {"secret_encoding:", signature.TemplateConfig{SecretEncoding: "hex"}},
	} {
		cfg := c.cfg
		cfg.Algorithm = signature.Token
		if cfg.Signature.From == "" {
			cfg.Signature.From = "header:X"
		}
		if cfg.Secrets == nil {
			cfg.Secrets = []string{"tok"}
		}
		if _, err := signature.NewTemplate(cfg); err == nil || !strings.HasPrefix(err.Error(), c.option) {
			t.Errorf("%s: %v, want an error about %s", name, err, c.option)
		}
	}
	if _, err := signature.NewTemplate(signature.TemplateConfig{Algorithm: signature.HMACSHA256, Secrets: []string{"s"}, Signature: signature.SignatureLocation{From: "header:X"}}); err == nil || !strings.HasPrefix(err.Error(), "string:") {
		t.Errorf("an HMAC without a string: %v", err)
	}
}

// The signer writes signatures and timestamps that are in the body into
// it, each item's in Items mode; what it writes is checked with the
// standard library over the strings the providers document, and by the
// template verifier.
func TestTemplateSignerInTheBody(t *testing.T) {
	signature.SetClock(t, templateNow)
	t.Run("signature and timestamp in the body", func(t *testing.T) {
		// Mailgun's: hex HMAC-SHA256 of {timestamp}{token}
		cfg := signature.TemplateConfig{
			String: "{json.signature.timestamp}{json.signature.token}", Algorithm: signature.HMACSHA256,
			Signature: signature.SignatureLocation{From: "json:signature.signature"},
			Timestamp: signature.TimestampLocation{From: "json:signature.timestamp"},
			Secrets:   []string{"webhook-signing-key"},
		}
		body := signTemplate(t, cfg, `{"signature":{"token":"tok-1"},"event-data":{"id":"e1","url":"https://a.example/?x=<y>&z"}}`)
		var got struct {
			Signature struct{ Timestamp, Token, Signature string }
			EventData struct{ URL string } `json:"event-data"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Signature.Timestamp != "1767225600" || got.EventData.URL != "https://a.example/?x=<y>&z" || !strings.Contains(string(body), "<y>&z") {
			t.Fatalf("body %s", body)
		}
		m := hmac.New(sha256.New, []byte("webhook-signing-key"))
		m.Write([]byte("1767225600tok-1"))
		if want := hex.EncodeToString(m.Sum(nil)); got.Signature.Signature != want {
			t.Fatalf("signature %s, want %s", got.Signature.Signature, want)
		}
		verifyWith(t, cfg, body, nil)
	})
	t.Run("each item", func(t *testing.T) {
		cfg := adyenConfig
		cfg.Secrets = []string{adyenKey}
		item := `{"NotificationRequestItem":{"amount":{"currency":"EUR","value":1000},"eventCode":"EVENT","merchantAccountCode":"merchantAccount","merchantReference":"reference","originalReference":"originalReference","pspReference":"pspReference","success":"true"}}`
		second := strings.NewReplacer(`"value":1000`, `"value":1001`, `"originalReference":"originalReference",`, "").Replace(item)
		body := signTemplate(t, cfg, `{"live":"false","notificationItems":[`+item+`,`+second+`]}`)
		// the first is the item of Adyen's published vector
		if !strings.Contains(string(body), `"hmacSignature":"`+adyenSig+`"`) {
			t.Fatalf("the first item's signature is not Adyen's: %s", body)
		}
		key, _ := hex.DecodeString(adyenKey)
		m := hmac.New(sha256.New, key)
		m.Write([]byte("pspReference::merchantAccount:reference:1001:EUR:EVENT:true"))
		if !strings.Contains(string(body), `"hmacSignature":"`+base64.StdEncoding.EncodeToString(m.Sum(nil))+`"`) {
			t.Fatalf("the second item's signature: %s", body)
		}
		verifyWith(t, cfg, body, nil)
		other := cfg
		other.Secrets = []string{"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"}
		verifyWith(t, other, body, signature.ErrInvalid)
	})
	t.Run("a token in each item", func(t *testing.T) {
		cfg := signature.TemplateConfig{Algorithm: signature.Token, Items: "json:value.#", Secrets: []string{"state-1"},
			Signature: signature.SignatureLocation{From: "json:clientState"}}
		body := signTemplate(t, cfg, `{"value":[{"id":"a"},{"id":"b","clientState":"stale"}]}`)
		if strings.Count(string(body), `"clientState":"state-1"`) != 2 {
			t.Fatalf("body %s", body)
		}
		verifyWith(t, cfg, body, nil)
	})
	t.Run("no items", func(t *testing.T) {
		cfg := signature.TemplateConfig{Algorithm: signature.Token, Items: "json:value.#", Secrets: []string{"state-1"},
			Signature: signature.SignatureLocation{From: "json:clientState"}}
		s, err := signature.NewTemplateSigner(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := sigtest.NewDelivery("/", []byte(`{"id":"a"}`), time.Time{})
		if _, err := s.Sign(d.Req, d.Body, templateNow); err == nil {
			t.Fatal("signed a body without items")
		}
	})
}

// signTemplate signs body with cfg's first secret and returns what is sent.
func signTemplate(t *testing.T, cfg signature.TemplateConfig, body string) []byte {
	t.Helper()
	s, err := signature.NewTemplateSigner(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := sigtest.NewDelivery("/", []byte(body), time.Time{})
	out, err := s.Sign(d.Req, d.Body, templateNow)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// verifyWith checks body against the template of cfg.
func verifyWith(t *testing.T, cfg signature.TemplateConfig, body []byte, want *signature.Error) {
	t.Helper()
	v, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := sigtest.NewDelivery("/", body, time.Time{})
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
}
