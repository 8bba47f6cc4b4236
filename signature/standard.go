package signature

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// NewStandardWebhooks returns the Standard Webhooks scheme, for headers
// whose names start with headerPrefix: `webhook-` for Standard Webhooks,
// `svix-` for Svix. `{prefix}signature: v1,<b64> …` is a space-separated
// list of signatures, each an HMAC-SHA256 in base64 of
// `{id}.{timestamp}.{body}` (from `{prefix}id` and `{prefix}timestamp`).
// A `v1` entry is an HMAC-SHA256 in base64 and a `v1a` entry an Ed25519
// signature in base64; other versions are ignored, and any entry valid
// under any key is accepted (at most 4 `v1a` entries are checked). Each
// secret is either `whsec_` followed by the base64 of an HMAC key (the
// prefix is optional, as in the reference library) or `whpk_` followed by
// the base64 of an Ed25519 public key; the list may mix both. A secret
// that does not decode is an error that does not echo it. The timestamp
// must be within tolerance of the current time (DefaultTolerance when
// zero).
//
// It follows the Standard Webhooks specification (symmetric and
// asymmetric signatures, "Signature scheme" and "Webhook headers") and
// its reference Go library
// (github.com/standard-webhooks/standard-webhooks/libraries/go), which
// Svix's "Verifying webhooks manually" describes as well. The library
// implements `v1` only.
func NewStandardWebhooks(headerPrefix string, secrets []string, tolerance time.Duration) (Verifier, error) {
	return newStandardWebhooks(headerPrefix, secrets, tolerance)
}

// standardWebhooks is the scheme of NewStandardWebhooks.
type standardWebhooks struct {
	idHeader, tsHeader, sigHeader string
	keys                          keyring // v1
	public                        edKeys  // v1a
	tolerance                     time.Duration
}

func newStandardWebhooks(prefix string, secrets []string, tolerance time.Duration) (*standardWebhooks, error) {
	var keys [][]byte
	var public edKeys
	for i, s := range secrets {
		if strings.HasPrefix(s, "whpk_") || strings.HasPrefix(s, "whsk_") {
			k, err := ParseEd25519PublicKey(s)
			if err != nil {
				return nil, fmt.Errorf("secret %d: %v", i+1, err)
			}
			public = append(public, k)
			continue
		}
		k, err := decodeWhsec(s)
		if err != nil || len(k) == 0 {
			return nil, fmt.Errorf("secret %d is not a Standard Webhooks secret (whsec_ followed by base64, or whpk_ and a public key)", i+1)
		}
		keys = append(keys, k)
	}
	return &standardWebhooks{
		idHeader:  http.CanonicalHeaderKey(prefix + "id"),
		tsHeader:  http.CanonicalHeaderKey(prefix + "timestamp"),
		sigHeader: http.CanonicalHeaderKey(prefix + "signature"),
		keys:      newHMACKeyring(sha256.New, keys),
		public:    public,
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
	symmetric, asymmetric := parseStandardSignatures(sig)
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(append(*msg, id...), '.'), ts...), '.')
	if v.keys.match(*msg, body, &symmetric) {
		return nil
	}
	if len(v.public) > 0 && asymmetric.n > 0 {
		// Ed25519 signs the whole message at once
		*msg = append(*msg, body...)
		if v.public.match(*msg, &asymmetric) {
			return nil
		}
	}
	return ErrInvalid
}

// parseStandardSignatures parses a space-separated list of
// `<version>,<base64>`: `v1` (symmetric) signatures, and at most
// maxAsymmetric `v1a` (asymmetric) ones; other versions are ignored.
func parseStandardSignatures(h string) (symmetric, asymmetric sigSet) {
	for i := 0; h != "" && i < maxHeaderItems; i++ {
		var item string
		item, h, _ = strings.Cut(h, " ")
		if sig, ok := strings.CutPrefix(item, "v1,"); ok {
			if !symmetric.add(Base64, sig) {
				break
			}
		} else if sig, ok := strings.CutPrefix(item, "v1a,"); ok && asymmetric.seen < maxAsymmetric {
			asymmetric.add(Base64, sig)
		}
	}
	return symmetric, asymmetric
}

var _ Verifier = (*standardWebhooks)(nil)
