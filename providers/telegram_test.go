package providers

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Telegram sends the setWebhook secret_token as it is in
// X-Telegram-Bot-Api-Secret-Token (Bot API, setWebhook); nothing is signed.
func TestTelegram(t *testing.T) {
	const token = "my_Bot-Secret_token-1"
	v := mustBuild(t, VerifyConfig{Scheme: "telegram", Secrets: []string{"old_token", token}})
	body := []byte(`{"update_id":10000,"message":{"date":1441645532,"chat":{"last_name":"Test Lastname","id":1111111,"first_name":"Test","username":"Test"},"message_id":1365,"from":{"last_name":"Test Lastname","id":1111111,"first_name":"Test","username":"Test"},"text":"/start"}}`)
	for _, c := range []struct {
		header string
		want   *signature.Error
	}{
		{token, nil},
		{"old_token", nil},
		{token + "x", signature.ErrInvalid},
		{"", signature.ErrMissing},
	} {
		r := post()
		if c.header != "" {
			r.Header.Set("X-Telegram-Bot-Api-Secret-Token", c.header)
		}
		if err := v.Verify(r, body); (err == nil) != (c.want == nil) {
			t.Errorf("%q: %v", c.header, err)
		}
	}
	// the token proves no body: a key from a header is not guarded by it
	if signed, bodySigned := SignedKeys("telegram"); bodySigned || len(signed) != 0 {
		t.Fatal("telegram's token is taken for a signature over the body")
	}
	s, err := NewSigner("telegram", SignConfig{Secret: token})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	if _, err := s.Sign(r, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(r, body); err != nil {
		t.Fatalf("what the signer sends: %v", err)
	}
}
