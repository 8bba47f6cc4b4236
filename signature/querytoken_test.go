package signature_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

func TestQueryToken(t *testing.T) {
	v, err := signature.NewQueryToken("hmac", []string{"old-token", "s3cr3t/+="})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		target string
		want   error
	}{
		{"/webhook/pix?hmac=old-token", nil},
		{"/webhook/pix?ignorar=&hmac=s3cr3t%2F%2B%3D", nil}, // percent-encoded, as a registered URL carries it
		{"/webhook/pix?hmac=s3cr3t/%2B=&hmac=wrong", nil},   // the first value counts
		{"/webhook/pix?hmac=wrong", signature.ErrInvalid},
		{"/webhook/pix?hmac=old-token-", signature.ErrInvalid},
		{"/webhook/pix?hmac=", signature.ErrMissing},
		{"/webhook/pix?HMAC=old-token", signature.ErrMissing}, // names are case-sensitive
		{"/webhook/pix", signature.ErrMissing},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", c.target, nil)
		if err := v.Verify(r, []byte(`{"pix":[]}`)); !errors.Is(err, c.want) && err != c.want {
			t.Errorf("%s: %v, want %v", c.target, err, c.want)
		}
	}
	if _, err := signature.NewQueryToken("", []string{"x"}); err == nil {
		t.Error("a query token scheme without a parameter name was built")
	}
	if _, err := signature.NewQueryToken("hmac", nil); err == nil {
		t.Error("a query token scheme without a token was built")
	}
}

func TestQueryTokenSigner(t *testing.T) {
	v, _ := signature.NewQueryToken("hmac", []string{"a b/+="})
	r := httptest.NewRequest("POST", "/webhook?ignorar=", nil)
	body, err := signature.NewQueryTokenSigner("hmac", "a b/+=").Sign(r, []byte(`{"pix":[]}`), time.Now())
	if err != nil || string(body) != `{"pix":[]}` {
		t.Fatalf("Sign: %q, %v", body, err)
	}
	if err := v.Verify(r, body); err != nil {
		t.Fatalf("a signed request does not verify: %v (%s)", err, r.URL)
	}
	if r.URL.Query().Get("ignorar") != "" || !r.URL.Query().Has("ignorar") {
		t.Fatalf("the query's other parameters were lost: %s", r.URL)
	}
}

func TestQueryTokenAllocatesLittle(t *testing.T) {
	v, _ := signature.NewQueryToken("hmac", []string{"tok"})
	r := httptest.NewRequest("POST", "/webhook/pix?ignorar=&hmac=tok", nil)
	if n := testing.AllocsPerRun(100, func() { _ = v.Verify(r, nil) }); n > 0 {
		t.Errorf("Verify allocates %.0f times", n)
	}
}
