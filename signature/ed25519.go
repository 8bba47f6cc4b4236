package signature

import (
	"crypto/ed25519"
	"errors"
	"net/http"
	"strings"
	"time"
)

// maxAsymmetric caps how many public-key signatures of one request are
// checked. An Ed25519 or RSA verification costs tens of microseconds, so a
// forged header listing sixteen of them would cost sixteen; senders put one
// per key being rotated, rarely more than two.
const maxAsymmetric = 4

// edKeys is a set of Ed25519 public keys (rotation).
type edKeys []ed25519.PublicKey

// match reports whether any of sigs, under any key, is an Ed25519
// signature of msg.
func (ks edKeys) match(msg []byte, sigs *sigSet) bool {
	for i := 0; i < sigs.n; i++ {
		if sigs.size[i] != ed25519.SignatureSize {
			continue
		}
		for _, k := range ks {
			if ed25519.Verify(k, msg, sigs.sig[i][:ed25519.SignatureSize]) {
				return true
			}
		}
	}
	return false
}

// NewEd25519 returns the generic Ed25519 scheme: an Ed25519 signature of
// the raw body, written in the named header with encoding enc, after
// prefix when prefix is not empty (a value without the prefix is then
// rejected). When the header is repeated, each value is a candidate (at
// most 4). A signature made with any of keys is accepted.
func NewEd25519(header, prefix string, enc Encoding, keys []ed25519.PublicKey) (Verifier, error) {
	sh, err := newSignedHeader(header, prefix, enc)
	if err != nil {
		return nil, err
	}
	if err := checkEd25519Keys(keys); err != nil {
		return nil, err
	}
	return &ed25519Verifier{signedHeader: sh, keys: keys}, nil
}

// ed25519Verifier is the scheme of NewEd25519.
type ed25519Verifier struct {
	signedHeader
	keys edKeys
}

// Verify implements Verifier.
func (v *ed25519Verifier) Verify(r *http.Request, body []byte) error {
	var sigs sigSet
	if err := v.signatures(r, maxAsymmetric, &sigs); err != nil {
		return err
	}
	if !v.keys.match(body, &sigs) {
		return ErrInvalid
	}
	return nil
}

// NewDiscord returns Discord's scheme for interactions and webhook events:
// `X-Signature-Ed25519`, the hex of an Ed25519 signature of
// `{X-Signature-Timestamp}{body}`, made with the application's key, whose
// public key (keys; several for rotation) Discord shows in hex on the
// application's page. The timestamp, in Unix seconds, must be within
// tolerance of the current time (DefaultTolerance when zero). It follows
// Discord's "Interactions: Receiving and Responding" (security and
// authorization) and discordgo's VerifyInteraction.
func NewDiscord(keys []ed25519.PublicKey, tolerance time.Duration) (Verifier, error) {
	if err := checkEd25519Keys(keys); err != nil {
		return nil, err
	}
	return &discordVerifier{keys: keys, tolerance: toleranceOrDefault(tolerance)}, nil
}

// discordVerifier is the scheme of NewDiscord.
type discordVerifier struct {
	keys      edKeys
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *discordVerifier) Verify(r *http.Request, body []byte) error {
	sig, ts := headerValue(r.Header, "X-Signature-Ed25519"), headerValue(r.Header, "X-Signature-Timestamp")
	if sig == "" || ts == "" {
		return ErrMissing
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	var sigs sigSet
	sigs.add(Hex, strings.TrimSpace(sig))
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(*msg, ts...), body...)
	if !v.keys.match(*msg, &sigs) {
		return ErrInvalid
	}
	return nil
}

// checkEd25519Keys refuses an empty key set and keys of the wrong size.
func checkEd25519Keys(keys []ed25519.PublicKey) error {
	if len(keys) == 0 {
		return errors.New("no public key")
	}
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return errors.New("an Ed25519 public key is 32 bytes")
		}
	}
	return nil
}

var (
	_ Verifier = (*ed25519Verifier)(nil)
	_ Verifier = (*discordVerifier)(nil)
)
