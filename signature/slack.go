package signature

import (
	"crypto/sha256"
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
	return &slackVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(secrets)),
		tolerance: toleranceOrDefault(tolerance),
	}
}

// slackVerifier is the scheme of NewSlack.
type slackVerifier struct {
	keys      keyring
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *slackVerifier) Verify(r *http.Request, body []byte) error {
	sig, ts := headerValue(r.Header, "X-Slack-Signature"), headerValue(r.Header, "X-Slack-Request-Timestamp")
	if sig == "" || ts == "" {
		return ErrMissing
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	var sigs sigSet
	if hexSig, ok := strings.CutPrefix(sig, "v0="); ok {
		sigs.add(Hex, hexSig)
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(*msg, "v0:"...), ts...), ':')
	return v.keys.check(*msg, body, &sigs)
}

var _ Verifier = (*slackVerifier)(nil)
