package signature

import (
	"net/http"
	"strings"
	"time"
)

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

var _ Verifier = (*v0Verifier)(nil)
