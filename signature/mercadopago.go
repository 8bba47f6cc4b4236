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
// from the query string (lower-cased) and a part whose value is absent is
// left out, as Mercado Pago documents (Mercado Pago Developers,
// "Webhooks" notifications: validating the origin of a notification).
// Each secret is the application's webhook secret signature, used as
// written. The timestamp, in seconds or milliseconds, must be within
// tolerance of the current time (DefaultTolerance when zero).
//
// The manifest does not cover the body, so when the body is JSON with a
// `data.id`, it must equal the signed one (case-insensitively): a body
// cannot be swapped for another resource's. Other body fields are not
// authenticated.
func NewMercadoPago(secrets []string, tolerance time.Duration) Verifier {
	return &mercadoPagoVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(secrets)),
		tolerance: toleranceOrDefault(tolerance),
	}
}

// mercadoPagoVerifier is the scheme of NewMercadoPago.
type mercadoPagoVerifier struct {
	keys      keyring
	tolerance time.Duration
}

// Verify implements Verifier.
func (v *mercadoPagoVerifier) Verify(r *http.Request, body []byte) error {
	ts, sigs, err := parseMercadoPagoSignature(headerValue(r.Header, "X-Signature"))
	if err != nil {
		return err
	}
	// Mercado Pago has sent seconds and milliseconds
	if err := checkTimestamp(ts, v.tolerance, true); err != nil {
		return err
	}
	dataID := strings.ToLower(query.Value(r.URL.RawQuery, "data.id"))
	if bodyID := gjson.GetBytes(body, "data.id"); bodyID.Exists() && !strings.EqualFold(bodyID.String(), dataID) {
		return ErrInvalid
	}
	msg := getScratch()
	defer putScratch(msg)
	if dataID != "" {
		*msg = append(append(append(*msg, "id:"...), dataID...), ';')
	}
	if reqID := headerValue(r.Header, "X-Request-Id"); reqID != "" {
		*msg = append(append(append(*msg, "request-id:"...), reqID...), ';')
	}
	*msg = append(append(append(*msg, "ts:"...), ts...), ';')
	return v.keys.check(*msg, nil, &sigs)
}

// parseMercadoPagoSignature parses `ts=…,v1=…`.
func parseMercadoPagoSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ",", "ts", "v1")
}

var _ Verifier = (*mercadoPagoVerifier)(nil)
