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
	return &urlHMAC{header: "X-Square-Hmacsha256-Signature", keys: newHMACKeyring(sha256.New, rawSecrets(secrets)), url: publicURL}
}

// urlHMAC is the scheme of Square and Twilio: one base64 HMAC, in a
// header, of a message that starts with the URL the provider delivered
// to. Square signs the body after the URL; Twilio signs what checkTwilio
// describes.
type urlHMAC struct {
	header string
	twilio bool
	keys   keyring
	url    PublicURL

	// twilioSHA2 are Twilio's keys for HMAC-SHA256 signatures (keys
	// holds the SHA-1 ones): see NewTwilio.
	twilioSHA2 keyring
}

// Verify implements Verifier.
func (v *urlHMAC) Verify(r *http.Request, body []byte) error {
	var sigs sigSet
	if err := base64Signature(&sigs, r.Header, v.header); err != nil {
		return err
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = v.url(*msg, r)
	if v.twilio {
		return v.checkTwilio(msg, r, body, &sigs)
	}
	return v.keys.check(*msg, body, &sigs)
}

var _ Verifier = (*urlHMAC)(nil)
