package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unsafe"
)

// The replay guard (README: Guarantees). A signature that covers the body
// but not the header or query parameter a key comes from (GitHub's
// X-GitHub-Delivery, Shopify's X-Shopify-Webhook-Id, Twilio's
// I-Twilio-Idempotency-Token, or any header or query key under a scheme
// that signs the body alone) lets whoever captured one signed delivery send
// it again under a new id: a new key, executed again. A key taken from such
// a source is claimed together with its guard, the key of the body alone
// (`<key_prefix>:<source>:sha256:<hex>`, the key the delivery gets without
// the header), as one claim in one store round trip: a replay of signed
// bytes already seen within ttl finds the guard taken and is answered as a
// duplicate, whatever id it carries. The key itself is unchanged, so a
// delivery is still found under `<key_prefix>:<source>:<id>`.

// markUnsignedKeys marks the header and query key sources whose value the
// handler's signature does not cover while it covers the body. Schemes
// that sign no body (a shared token) mark none: a replay of their bytes
// proves nothing a forgery would not.
func (h *Handler) markUnsignedKeys() {
	if h.verifier == nil {
		return
	}
	scheme := h.scheme()
	var signed []string
	switch scheme {
	case "hmac", "ed25519", "rsa":
		// generic schemes over the body alone
	case "token", "jwt":
		// a shared token, or a JWT over claims alone
		return
	default:
		p := providers[scheme]
		if p.bodyUnsigned {
			return
		}
		signed = p.signed
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

// guards reports whether the handler claims any key with a guard.
func (h *Handler) guards() bool {
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
func (h *Handler) recordGuard(key string, info keyInfo) string {
	if info.state != keyCompleted || strings.HasPrefix(key, bodyHashPrefix) {
		return ""
	}
	rec, err := decodeRecord(info.record)
	if err != nil || len(rec.bodyHash) != sha256.Size {
		return ""
	}
	return h.guardKey((*[sha256.Size]byte)(rec.bodyHash))
}

// guardKey is the guard of a key taken from an unsigned source: the key of
// the body hash, `<key_prefix>:<source>:sha256:<hex>`, built in one
// allocation.
func (h *Handler) guardKey(bodyHash *[32]byte) string {
	b := make([]byte, len(h.keyPrefix)+len(bodyHashPrefix)+hex.EncodedLen(len(bodyHash)))
	n := copy(b, h.keyPrefix)
	n += copy(b[n:], bodyHashPrefix)
	hex.Encode(b[n:], bodyHash[:])
	return unsafe.String(unsafe.SliceData(b), len(b))
}
