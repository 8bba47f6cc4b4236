// Package sigtest signs webhook deliveries the way each provider does, and
// holds the checks every signature scheme must pass, for the tests of
// package signature and of the Caddy module's presets. Only tests import
// it.
//
// The signing helpers follow each provider's documented formula and are
// written without the production code, so that a mistake in one is not
// mirrored in the other. Where a provider publishes a Go library, the
// library signs (Stripe, Standard Webhooks) or checks the helper's output
// (Slack, GitHub, Paddle, Twilio).
package sigtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// HMAC is the HMAC of the concatenated parts.
func HMAC(newHash func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// HMACHex is the HMAC-SHA256 of the concatenated parts in hex.
func HMACHex(key string, parts ...string) string {
	return hex.EncodeToString(HMAC(sha256.New, []byte(key), parts...))
}

// HMACBase64 is the HMAC-SHA256 of the concatenated parts in base64.
func HMACBase64(key string, parts ...string) string {
	return base64.StdEncoding.EncodeToString(HMAC(sha256.New, []byte(key), parts...))
}

// Delivery is a delivery to sign: body, time and the request it goes in.
type Delivery struct {
	Body []byte
	At   time.Time
	Req  *http.Request
}

// NewDelivery returns an unsigned POST of body to target.
func NewDelivery(target string, body []byte, at time.Time) *Delivery {
	return &Delivery{Body: body, At: at, Req: httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))}
}

// SetBody replaces the body of the delivery and of its request.
func (d *Delivery) SetBody(body []byte) {
	d.Body = body
	d.Req.Body = io.NopCloser(bytes.NewReader(body))
	d.Req.ContentLength = int64(len(body))
}

// Unix is t in Unix seconds.
func Unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// WantReason fails t unless err is want (nil: success), compared by
// Reason as the handler does.
func WantReason(t testing.TB, err error, want *signature.Error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	var ve *signature.Error
	if !errors.As(err, &ve) || ve.Reason != want.Reason {
		t.Fatalf("want %q, got %v", want.Reason, err)
	}
}

// Build returns the verifier of a case with the given tolerance and
// secrets, failing t when it cannot.
type Build func(t *testing.T, tolerance time.Duration, secrets ...string) signature.Verifier

// Run checks that the verifier build makes for c accepts c's deliveries
// and rejects tampered, unsigned, mis-signed and stale ones, with the
// right reason, under rotation and any tolerance.
func Run(t *testing.T, c Case, build Build) {
	a, b, wrong := c.Secrets[0], c.Secrets[1], c.Secrets[2]
	v := build(t, signature.DefaultTolerance, a)

	t.Run("valid", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now())
		WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("tampered body", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now())
		tampered := bytes.Replace(d.Body, []byte("{"), []byte("{ "), 1)
		if c.Tamper != nil {
			tampered = c.Tamper(d)
		}
		if tampered == nil {
			t.Skipf("%s does not sign the body", c.Scheme)
		}
		WantReason(t, v.Verify(d.Req, tampered), signature.ErrInvalid)
	})
	t.Run("missing header", func(t *testing.T) {
		for _, h := range c.Headers {
			d := c.Delivery(t, a, time.Now())
			d.Req.Header.Del(h)
			if err := v.Verify(d.Req, d.Body); err == nil {
				t.Fatalf("without %s: accepted", h)
			} else {
				WantReason(t, err, signature.ErrMissing)
			}
		}
	})
	t.Run("empty header", func(t *testing.T) {
		// one rule for every scheme: a header it needs that is present
		// but empty, or blank, is a missing signature, as an absent one is
		for _, h := range c.Headers {
			for _, empty := range []string{"", " \t "} {
				d := c.Delivery(t, a, time.Now())
				d.Req.Header.Set(h, empty)
				if err := v.Verify(d.Req, d.Body); err == nil {
					t.Fatalf("with %s: %q: accepted", h, empty)
				} else {
					WantReason(t, err, signature.ErrMissing)
				}
			}
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		d := c.Delivery(t, wrong, time.Now())
		WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	})
	t.Run("garbage signature", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now())
		for _, h := range c.Headers {
			d.Req.Header.Set(h, "\x00,;=v1=t=ts=h1=")
		}
		if err := v.Verify(d.Req, d.Body); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("rotation", func(t *testing.T) {
		both := build(t, signature.DefaultTolerance, a, b)
		for _, s := range []string{a, b} {
			d := c.Delivery(t, s, time.Now())
			WantReason(t, both.Verify(d.Req, d.Body), nil)
		}
		d := c.Delivery(t, wrong, time.Now())
		WantReason(t, both.Verify(d.Req, d.Body), signature.ErrInvalid)
		// the new secret alone rejects deliveries signed with the old
		d = c.Delivery(t, a, time.Now())
		WantReason(t, build(t, signature.DefaultTolerance, b).Verify(d.Req, d.Body), signature.ErrInvalid)
	})
	if !c.Timestamped {
		return
	}
	t.Run("old timestamp", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now().Add(-6*time.Minute))
		WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)
	})
	t.Run("future timestamp", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now().Add(6*time.Minute))
		WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)
	})
	t.Run("within tolerance", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now().Add(-4*time.Minute))
		WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("configured tolerance", func(t *testing.T) {
		d := c.Delivery(t, a, time.Now().Add(-30*time.Minute))
		WantReason(t, build(t, time.Hour, a).Verify(d.Req, d.Body), nil)
		WantReason(t, build(t, time.Minute, a).Verify(d.Req, d.Body), signature.ErrTimestamp)
	})
}

// BenchBody is a 2 KB delivery of the shape each scheme expects.
func BenchBody(scheme string) []byte {
	if scheme == "twilio" {
		b := "To=%2B18005551212&From=%2B14158675309&MessageSid=SM1&Body="
		return []byte(b + strings.Repeat("a", 2048-len(b)))
	}
	b := `{"id":"evt_1","data":{"id":"abc123"},"pad":"`
	return []byte(b + strings.Repeat("x", 2048-len(b)-2) + `"}`)
}
