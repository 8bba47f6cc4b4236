package signature

import (
	"crypto/sha256"
	"net/http"
)

// NewShopify returns Shopify's scheme: the HMAC-SHA256 of the raw body in
// base64, keyed with the app's client secret, in `X-Shopify-Hmac-Sha256`
// (webhooks) or, without the `X-` prefix, in `Shopify-Hmac-Sha256` (the
// newer Events deliveries, which name every header `shopify-…`). A
// delivery that carries `Shopify-Hmac-Sha256` is checked against it alone,
// as @shopify/shopify-api (15.0.0, webhooks/validate.ts:
// detectWebhookType) decides which kind a delivery is; otherwise
// `X-Shopify-Hmac-Sha256` is checked. Sources: shopify.dev, "Verify
// webhook deliveries" and "Verify Events deliveries".
func NewShopify(secrets []string) Verifier {
	return &shopifyVerifier{
		events:   signedHeader{header: "Shopify-Hmac-Sha256", encoding: Base64},
		webhooks: signedHeader{header: "X-Shopify-Hmac-Sha256", encoding: Base64},
		keys:     newHMACKeyring(sha256.New, rawSecrets(secrets)),
	}
}

// shopifyVerifier is the scheme of NewShopify.
type shopifyVerifier struct {
	events, webhooks signedHeader
	keys             keyring
}

// Verify implements Verifier.
func (v *shopifyVerifier) Verify(r *http.Request, body []byte) error {
	var sigs sigSet
	err := v.events.signatures(r, maxSignatures, &sigs)
	if err == ErrMissing {
		err = v.webhooks.signatures(r, maxSignatures, &sigs)
	}
	if err != nil {
		return err
	}
	return v.keys.check(nil, body, &sigs)
}

var _ Verifier = (*shopifyVerifier)(nil)
