package signature

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// NewMercadoPago returns Mercado Pago's scheme: `x-signature: ts=…,v1=…`,
// an HMAC-SHA256 hex of the manifest
// `id:{data.id};request-id:{x-request-id};ts:{ts};`, where data.id comes
// from the query string and a part whose value is absent is left out, as
// Mercado Pago documents (Mercado Pago Developers, "Webhooks"
// notifications: validating the origin of a notification) and its SDKs
// compute it (mercadopago/sdk-nodejs, WebhookSignatureValidator).
//
// data.id is signed as received: Mercado Pago signs the original casing
// (sdk-nodejs commit ac20999, "preserve data.id case in signature
// manifest"). When that fails and data.id has upper-case letters, its
// lower-cased form is tried too, as the older documentation computed it.
// Each secret is the application's webhook secret signature, used as
// written.
//
// A tolerance of zero checks no timestamp, as in the SDKs, where the check
// is optional: Mercado Pago retries for days, and a retry may carry its
// first attempt's ts. A positive tolerance rejects a ts (in seconds, or
// milliseconds when it is that large) further than that from the current
// time.
//
// The manifest does not cover the body, so when the body is JSON with a
// `data.id`, it must equal the signed one (case-insensitively): a body
// cannot be swapped for another resource's. Other body fields are not
// authenticated.
func NewMercadoPago(secrets []string, tolerance time.Duration) Verifier {
	return &mercadoPagoVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(secrets)),
		tolerance: tolerance,
	}
}

// mercadoPagoVerifier is the scheme of NewMercadoPago.
type mercadoPagoVerifier struct {
	keys      keyring
	tolerance time.Duration // zero: no timestamp check
}

// Verify implements Verifier.
func (v *mercadoPagoVerifier) Verify(r *http.Request, body []byte) error {
	ts, sigs, err := parseMercadoPagoSignature(headerValue(r.Header, "X-Signature"))
	if err != nil {
		return err
	}
	if v.tolerance > 0 {
		// Mercado Pago has sent seconds and milliseconds
		if err := checkTimestamp(ts, v.tolerance, true); err != nil {
			return err
		}
	} else if _, ok := parseUint(ts); !ok {
		return ErrInvalid
	}
	dataID := query.Value(r.URL.RawQuery, "data.id")
	if bodyID := gjson.GetBytes(body, "data.id"); bodyID.Exists() && !strings.EqualFold(bodyID.String(), dataID) {
		return ErrInvalid
	}
	reqID := headerValue(r.Header, "X-Request-Id")
	msg := getScratch()
	defer putScratch(msg)
	*msg = appendMercadoPagoManifest(*msg, dataID, reqID, ts)
	if v.keys.match(*msg, nil, &sigs) {
		return nil
	}
	if lower := strings.ToLower(dataID); lower != dataID {
		*msg = appendMercadoPagoManifest((*msg)[:0], lower, reqID, ts)
		return v.keys.check(*msg, nil, &sigs)
	}
	return ErrInvalid
}

// appendMercadoPagoManifest appends the signed manifest; absent parts are
// left out.
func appendMercadoPagoManifest(dst []byte, dataID, reqID, ts string) []byte {
	if dataID != "" {
		dst = append(append(append(dst, "id:"...), dataID...), ';')
	}
	if reqID != "" {
		dst = append(append(append(dst, "request-id:"...), reqID...), ';')
	}
	return append(append(append(dst, "ts:"...), ts...), ';')
}

// parseMercadoPagoSignature parses `ts=…,v1=…`.
func parseMercadoPagoSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ",", "ts", "v1")
}

var _ Verifier = (*mercadoPagoVerifier)(nil)
