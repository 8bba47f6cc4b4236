package signature

import (
	"crypto/sha256"
	"net/http"
	"strings"
)

// NewPagBank returns PagBank's scheme: `x-authenticity-token`, the SHA-256
// hex of `{token}-{body}` (a plain digest, not an HMAC), where each secret
// is the account's token. It follows PagBank's developer documentation on
// confirming the authenticity of a notification.
func NewPagBank(secrets []string) Verifier {
	return &pagBankVerifier{keys: newDigestKeyring(sha256.New, secrets, "-")}
}

// pagBankVerifier is the scheme of NewPagBank.
type pagBankVerifier struct {
	keys keyring
}

// Verify implements Verifier.
func (v *pagBankVerifier) Verify(r *http.Request, body []byte) error {
	sig := strings.TrimSpace(headerValue(r.Header, "X-Authenticity-Token"))
	if sig == "" {
		return ErrMissing
	}
	var sigs sigSet
	sigs.add(Hex, sig)
	return v.keys.check(nil, body, &sigs)
}

var _ Verifier = (*pagBankVerifier)(nil)
