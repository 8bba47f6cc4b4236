package signature

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"time"
)

// TwitchTolerance is how old a Twitch message may be when NewTwitch is
// given a tolerance of zero: Twitch's documentation advises rejecting
// messages older than 10 minutes.
const TwitchTolerance = 10 * time.Minute

// NewTwitch returns the scheme of Twitch EventSub's webhook transport:
// `Twitch-Eventsub-Message-Signature: sha256=<hex>`, an HMAC-SHA256 of
// `{Twitch-Eventsub-Message-Id}{Twitch-Eventsub-Message-Timestamp}{body}`
// keyed with the subscription's secret. The timestamp, in RFC 3339 with
// nanoseconds, must be within tolerance of the current time
// (TwitchTolerance when zero). It follows Twitch's "Handling Webhook
// Events" (verifying the event message) and the signing code of Twitch's
// CLI (github.com/twitchdev/twitch-cli, `twitch event trigger`).
func NewTwitch(secrets []string, tolerance time.Duration) Verifier {
	if tolerance <= 0 {
		tolerance = TwitchTolerance
	}
	return &twitchVerifier{keys: newHMACKeyring(sha256.New, rawSecrets(secrets)), tolerance: tolerance}
}

// twitchVerifier is the scheme of NewTwitch.
type twitchVerifier struct {
	keys      keyring
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *twitchVerifier) Verify(r *http.Request, body []byte) error {
	id := headerValue(r.Header, "Twitch-Eventsub-Message-Id")
	ts := headerValue(r.Header, "Twitch-Eventsub-Message-Timestamp")
	sig := headerValue(r.Header, "Twitch-Eventsub-Message-Signature")
	if id == "" || ts == "" || sig == "" {
		return ErrMissing
	}
	if err := checkRFC3339(ts, v.tolerance); err != nil {
		return err
	}
	var sigs sigSet
	if hexSig, ok := strings.CutPrefix(strings.TrimSpace(sig), "sha256="); ok {
		sigs.add(Hex, hexSig)
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(*msg, id...), ts...)
	return v.keys.check(*msg, body, &sigs)
}

// checkRFC3339 parses an RFC 3339 time (fractional seconds optional) and
// checks it against the tolerance.
func checkRFC3339(v string, tolerance time.Duration) error {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return ErrInvalid
	}
	return withinTolerance(t, tolerance)
}

var _ Verifier = (*twitchVerifier)(nil)
