package signature

import (
	"crypto/sha256"
	"net/http"
)

// NewSquare returns Square's scheme: `x-square-hmacsha256-signature`,
// HMAC-SHA256 base64 of the notification URL followed by the body. Each
// secret is a webhook subscription's signature key; publicURL, which must
// not be nil, gives the notification URL Square delivered to. It follows
// Square's "Validate that the notification is from Square" (Square
// Developer, Webhooks).
func NewSquare(secrets []string, publicURL PublicURL) Verifier {
	return &squareVerifier{keys: newHMACKeyring(sha256.New, rawSecrets(secrets)), url: publicURL}
}

// squareVerifier is the scheme of NewSquare.
type squareVerifier struct {
	keys keyring
	url  PublicURL
}

// Verify implements Verifier.
func (v *squareVerifier) Verify(r *http.Request, body []byte) error {
	var sigs sigSet
	if err := base64Signature(&sigs, r.Header, "X-Square-Hmacsha256-Signature"); err != nil {
		return err
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = v.url(*msg, r)
	return v.keys.check(*msg, body, &sigs)
}

var _ Verifier = (*squareVerifier)(nil)
