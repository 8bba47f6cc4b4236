package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// NewStandardWebhooks returns the Standard Webhooks scheme, for headers
// whose names start with headerPrefix: `webhook-` for Standard Webhooks,
// `svix-` for Svix. `{prefix}signature: v1,<b64> …` is a space-separated
// list of signatures, each an HMAC-SHA256 in base64 of
// `{id}.{timestamp}.{body}` (from `{prefix}id` and `{prefix}timestamp`);
// only `v1` entries are taken, any of which may match. Each secret is
// `whsec_` followed by the base64 of the key; the prefix is optional, as
// in the reference library. A secret that does not decode is an error
// that does not echo it. The timestamp must be within tolerance of the
// current time (DefaultTolerance when zero).
//
// It follows the Standard Webhooks specification and its reference Go
// library (github.com/standard-webhooks/standard-webhooks/libraries/go),
// which Svix's "Verifying webhooks manually" describes as well.
func NewStandardWebhooks(headerPrefix string, secrets []string, tolerance time.Duration) (Verifier, error) {
	return newStandardWebhooks(headerPrefix, secrets, tolerance)
}

// standardWebhooks is the scheme of NewStandardWebhooks.
type standardWebhooks struct {
	idHeader, tsHeader, sigHeader string
	keys                          keyring
	tolerance                     time.Duration
}

func newStandardWebhooks(prefix string, secrets []string, tolerance time.Duration) (*standardWebhooks, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(k) == 0 {
			return nil, fmt.Errorf("secret %d is not a Standard Webhooks secret (whsec_ followed by base64)", i+1)
		}
		keys[i] = k
	}
	return &standardWebhooks{
		idHeader:  http.CanonicalHeaderKey(prefix + "id"),
		tsHeader:  http.CanonicalHeaderKey(prefix + "timestamp"),
		sigHeader: http.CanonicalHeaderKey(prefix + "signature"),
		keys:      newHMACKeyring(sha256.New, keys),
		tolerance: toleranceOrDefault(tolerance),
	}, nil
}

// Verify implements Verifier.
func (v *standardWebhooks) Verify(r *http.Request, body []byte) error {
	id, ts, sig := headerValue(r.Header, v.idHeader), headerValue(r.Header, v.tsHeader), headerValue(r.Header, v.sigHeader)
	if id == "" || ts == "" || sig == "" {
		return ErrMissing
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	sigs := parseStandardSignatures(sig)
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(append(*msg, id...), '.'), ts...), '.')
	return v.keys.check(*msg, body, &sigs)
}

// parseStandardSignatures parses a space-separated list of
// `<version>,<base64>`; only `v1` (symmetric) signatures are taken.
func parseStandardSignatures(h string) (sigs sigSet) {
	for i := 0; h != "" && i < maxHeaderItems; i++ {
		var item string
		item, h, _ = strings.Cut(h, " ")
		if sig, ok := strings.CutPrefix(item, "v1,"); ok {
			if !sigs.add(Base64, sig) {
				break
			}
		}
	}
	return sigs
}

var _ Verifier = (*standardWebhooks)(nil)
