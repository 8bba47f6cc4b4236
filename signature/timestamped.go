package signature

import (
	"crypto/sha256"
	"net/http"
	"strings"
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

// NewSlack returns Slack's scheme: `X-Slack-Signature: v0=<hex>`, an
// HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}` keyed with the
// app's signing secret. The timestamp must be within tolerance of the
// current time (DefaultTolerance when zero). It follows Slack's
// "Verifying requests from Slack" and slack-go's SecretsVerifier.
func NewSlack(secrets []string, tolerance time.Duration) Verifier {
	return newV0Verifier("X-Slack-Signature", "X-Slack-Request-Timestamp", false, secrets, tolerance)
}

// NewZoom returns Zoom's scheme, Slack's with other headers:
// `x-zm-signature: v0=<hex>`, an HMAC-SHA256 of
// `v0:{x-zm-request-timestamp}:{body}` keyed with the app's secret token.
// The timestamp (seconds, or milliseconds when it is that large) must be
// within tolerance of the current time (DefaultTolerance when zero). It
// follows Zoom's "Using webhooks" (verify webhook events) and Zoom's
// webhook sample (github.com/zoom/webhook-sample).
func NewZoom(secrets []string, tolerance time.Duration) Verifier {
	return newV0Verifier("X-Zm-Signature", "X-Zm-Request-Timestamp", true, secrets, tolerance)
}

// v0Verifier is the `v0=` scheme of Slack and Zoom.
type v0Verifier struct {
	sigHeader, tsHeader string
	timestampedHMAC
}

func newV0Verifier(sigHeader, tsHeader string, millis bool, secrets []string, tolerance time.Duration) *v0Verifier {
	return &v0Verifier{sigHeader: sigHeader, tsHeader: tsHeader, timestampedHMAC: newTimestampedHMAC(secrets, tolerance, millis)}
}

// Verify implements Verifier.
func (v *v0Verifier) Verify(r *http.Request, body []byte) error {
	sig, ts := headerValue(r.Header, v.sigHeader), headerValue(r.Header, v.tsHeader)
	if sig == "" || ts == "" {
		return ErrMissing
	}
	var sigs sigSet
	if hexSig, ok := strings.CutPrefix(sig, "v0="); ok {
		sigs.add(Hex, hexSig)
	}
	return v.verify("v0:", ts, ':', body, &sigs)
}

// timestampedHMAC is the part the timestamped HMAC schemes share (Stripe,
// Paddle, Slack, Zoom): HMAC-SHA256 keys over `{prefix}{ts}{sep}{body}`,
// where ts is a Unix timestamp within the tolerance of the current time.
type timestampedHMAC struct {
	keys      keyring
	tolerance time.Duration
	millis    bool // ts is in milliseconds when it is that large
}

func newTimestampedHMAC(secrets []string, tolerance time.Duration, millis bool) timestampedHMAC {
	return timestampedHMAC{
		keys:      newHMACKeyring(sha256.New, rawSecrets(secrets)),
		tolerance: toleranceOrDefault(tolerance),
		millis:    millis,
	}
}

// verify checks ts against the tolerance, then sigs against the HMAC of
// `{prefix}{ts}{sep}{body}`.
func (t *timestampedHMAC) verify(prefix, ts string, sep byte, body []byte, sigs *sigSet) error {
	if err := checkTimestamp(ts, t.tolerance, t.millis); err != nil {
		return err
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(*msg, prefix...), ts...), sep)
	return t.keys.check(*msg, body, sigs)
}

var (
	_ Verifier = (*signedList)(nil)
	_ Verifier = (*v0Verifier)(nil)
)
