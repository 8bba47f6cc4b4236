package signature

import (
	"crypto/sha256"
	"net/http"
	"time"

	"github.com/tidwall/gjson"
)

// NewLinear returns Linear's scheme: `Linear-Signature`, the HMAC-SHA256
// hex of the body keyed with the webhook's signing secret. Linear signs no
// timestamp in a header, but puts `webhookTimestamp` (Unix milliseconds)
// in the signed body: when tolerance is positive, it must be present and
// within tolerance of the current time; when it is zero, it is not
// checked. It follows Linear's "Webhooks" documentation (securing
// webhooks) and LinearWebhookClient.verify of Linear's SDK (@linear/sdk),
// which checks the timestamp within one minute.
func NewLinear(secrets []string, tolerance time.Duration) Verifier {
	return &linearVerifier{
		body: hmacVerifier{
			signedHeader: signedHeader{header: "Linear-Signature", encoding: Hex},
			keys:         newHMACKeyring(sha256.New, rawSecrets(secrets)),
		},
		tolerance: tolerance,
	}
}

// linearVerifier is the scheme of NewLinear.
type linearVerifier struct {
	body      hmacVerifier
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *linearVerifier) Verify(r *http.Request, body []byte) error {
	if err := v.body.Verify(r, body); err != nil {
		return err
	}
	if v.tolerance <= 0 {
		return nil
	}
	ts := gjson.GetBytes(body, "webhookTimestamp")
	if ts.Type != gjson.Number {
		return ErrTimestamp
	}
	return withinTolerance(time.UnixMilli(ts.Int()), v.tolerance)
}

var _ Verifier = (*linearVerifier)(nil)
