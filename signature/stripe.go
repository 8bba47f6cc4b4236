package signature

import (
	"net/http"
	"time"
)

// NewStripe returns Stripe's scheme: `Stripe-Signature: t=…,v1=…[,v1=…]`,
// an HMAC-SHA256 hex of `{t}.{body}`, any `v1` of which may match (other
// schemes, such as test-mode `v0`, are ignored). Each secret is an
// endpoint's signing secret, used as written: `whsec_…` is not decoded.
// The timestamp must be within tolerance of the current time
// (DefaultTolerance when zero). It follows Stripe's documentation
// ("Verify webhook signatures manually") and stripe-go's webhook package.
func NewStripe(secrets []string, tolerance time.Duration) Verifier {
	return newSignedList("Stripe-Signature", '.', parseStripeSignature, secrets, tolerance)
}

// NewPaddle returns Paddle Billing's scheme:
// `Paddle-Signature: ts=…;h1=…[;h1=…]`, an HMAC-SHA256 hex of
// `{ts}:{body}`. Paddle sends one `h1` per active secret while a secret is
// being rotated; any may match. Each secret is a notification
// destination's secret key, used as written. The timestamp must be within
// tolerance of the current time (DefaultTolerance when zero). It follows
// Paddle's "Verify webhook signatures" and paddle-go-sdk's
// WebhookVerifier.
func NewPaddle(secrets []string, tolerance time.Duration) Verifier {
	return newSignedList("Paddle-Signature", ':', parsePaddleSignature, secrets, tolerance)
}

// signedList is a scheme that sends a timestamp and a list of HMAC-SHA256
// hex signatures of `{ts}{sep}{body}` in one header, any of which may
// match (Stripe, Paddle).
type signedList struct {
	header string
	sep    byte
	parse  func(string) (ts string, sigs sigSet, err error)
	timestampedHMAC
}

func newSignedList(header string, sep byte, parse func(string) (string, sigSet, error), secrets []string, tolerance time.Duration) *signedList {
	return &signedList{header: header, sep: sep, parse: parse, timestampedHMAC: newTimestampedHMAC(secrets, tolerance, false)}
}

// Verify implements Verifier.
func (v *signedList) Verify(r *http.Request, body []byte) error {
	ts, sigs, err := v.parse(headerValue(r.Header, v.header))
	if err != nil {
		return err
	}
	return v.verify("", ts, v.sep, body, &sigs)
}

// parseStripeSignature parses `t=…,v1=…[,v1=…]`; other schemes (`v0`) are
// ignored.
func parseStripeSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ",", "t", "v1")
}

// parsePaddleSignature parses `ts=…;h1=…[;h1=…]`.
func parsePaddleSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ";", "ts", "h1")
}

var _ Verifier = (*signedList)(nil)
