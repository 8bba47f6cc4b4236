package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unsafe"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The replay guard (docs/providers.md, "Replay guard"). A signature that
// covers the body but not the header or query parameter a key comes from
// (GitHub's X-GitHub-Delivery, Shopify's X-Shopify-Webhook-Id, Twilio's
// I-Twilio-Idempotency-Token, or any header or query key under a scheme
// that signs the body alone) lets whoever captured one signed delivery send
// it again under a new id. But providers also send byte-identical bodies
// for distinct events (GitHub's org_block, membership, organization,
// sponsorship and github_app_authorization payloads carry no id or time),
// and dropping one of those loses an event. So a key taken from such a
// source is claimed, in the same store round trip, with a second key of
// the body alone:
//
//   - `flag` (the default): a note, `<key_prefix>:<source>:seen-sha256:<hex>`,
//     holding the first key its bytes came under. A delivery that finds it
//     holding another key is processed all the same, with
//     `Webhook-Replay-Suspected: <first key>` for the application, a WARN
//     and a counter.
//   - `reject`: a guard, `<key_prefix>:<source>:sha256:<hex>` (the key the
//     delivery gets without the header), claimed with the key, all or
//     none: a replay of signed bytes already seen within ttl finds it taken
//     and is answered as a duplicate of the first, whatever id it carries.
//   - `off`: the key alone.
//
// The key itself is unchanged, so a delivery is still found under
// `<key_prefix>:<source>:<id>`.

// guardMode is the value of `replay_guard`.
type guardMode uint8

const (
	guardFlag guardMode = iota
	guardReject
	guardOff
)

var guardModes = cfparse.Keywords[guardMode]{{Word: "flag", Value: guardFlag}, {Word: "reject", Value: guardReject}, {Word: "off", Value: guardOff}}

// parseReplayGuard parses `replay_guard flag | reject | off` ("" is flag).
func parseReplayGuard(v string) (guardMode, error) {
	if v == "" {
		return guardFlag, nil
	}
	return guardModes.Parse("replay_guard", v)
}

// notePrefix starts the value of a note's key (see sanitizeKeyValue).
const notePrefix = "seen-sha256:"

// markUnsignedKeys marks the header and query key sources whose value the
// handler's signature does not cover while it covers the body. Schemes
// that sign no body (a shared token) mark none: a replay of their bytes
// proves nothing a forgery would not.
func (h *Handler) markUnsignedKeys() {
	if h.verification == nil {
		return
	}
	signed, bodySigned := providers.SignedKeys(h.scheme())
	if !bodySigned {
		return
	}
	for i := range h.keys {
		ks := &h.keys[i]
		ks.unsigned = (ks.kind == keyHeader || ks.kind == keyQuery) && !signsKey(signed, *ks)
	}
}

// signsKey reports whether ks is among the signed key sources of a
// provider (`header:<Name>`, `query:<name>`, or `query:*` for every query
// parameter of a signed URL).
func signsKey(signed []string, ks keySource) bool {
	for _, s := range signed {
		if s == "query:*" && ks.kind == keyQuery {
			return true
		}
		if k, err := parseKeySource(s); err == nil && k.kind == ks.kind && k.arg == ks.arg {
			return true
		}
	}
	return false
}

// nonceGuard makes the delivery's nonce (the preset's Nonce: a value the
// provider uses once, such as Mailgun's token) its guard, claimed with the
// key all or none: a delivery whose nonce was seen within ttl under
// another key is answered as a duplicate of the first.
func (rs *requestState) nonceGuard() error {
	v, from, err := resolveKey([]keySource{*rs.h.nonce}, rs.r, rs.content(), &rs.bodyHash)
	if err != nil || from.kind == keyBody {
		// no nonce (resolveKey falls back to the body)
		return err
	}
	sum := sha256.Sum256([]byte(v))
	rs.claim.Guard, rs.claim.Noted = rs.h.guardKey(noncePrefix, &sum), false
	return nil
}

// noncePrefix starts the value of a nonce's guard.
const noncePrefix = "nonce-sha256:"

// guards reports whether the handler claims any key with a guard
// (`replay_guard reject`).
func (h *Handler) guards() bool {
	if h.nonce != nil {
		return true
	}
	if h.guardMode != guardReject {
		return false
	}
	for _, ks := range h.keys {
		if ks.unsigned {
			return true
		}
	}
	return false
}

// recordGuard returns the guard a completed key (its value, as in the key
// placeholder, and what the store holds) was claimed with: the body key of
// its record's body hash. It is "" when the key is a body key itself, is
// not completed, or its record cannot be read.
func (h *Handler) recordGuard(key string, info store.KeyInfo) string {
	if info.State != store.KeyCompleted || strings.HasPrefix(key, bodyHashPrefix) {
		return ""
	}
	rec, err := record.Decode(info.Record)
	if err != nil || len(rec.BodyHash) != sha256.Size {
		return ""
	}
	return h.guardKey(bodyHashPrefix, (*[sha256.Size]byte)(rec.BodyHash))
}

// guardKey is the guard (with bodyHashPrefix) or the note (with
// notePrefix) of a key taken from an unsigned source:
// `<key_prefix>:<source>:<prefix><hex>` of the body hash, built in one
// allocation.
func (h *Handler) guardKey(prefix string, bodyHash *[32]byte) string {
	b := make([]byte, len(h.keyPrefix)+len(prefix)+hex.EncodedLen(len(bodyHash)))
	n := copy(b, h.keyPrefix)
	n += copy(b[n:], prefix)
	hex.Encode(b[n:], bodyHash[:])
	return unsafe.String(unsafe.SliceData(b), len(b))
}
