package signature

import (
	"crypto"
	"crypto/sha512"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// NewHMAC returns the generic HMAC scheme: an HMAC of the raw body with
// the hash h (SHA-1, SHA-256 and SHA-512 are linked in; any available hash
// of at most 64 bytes is accepted), written in the named header with
// encoding enc, after prefix when prefix is not empty (a value without the
// prefix is then rejected). When the header is repeated, each value is a
// candidate (at most 16). Each secret is an HMAC key, used as written.
//
// It is the scheme of:
//   - GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 (GitHub
//     Docs, "Validating webhook deliveries"; go-github's
//     ValidateSignature);
//   - Meta (WhatsApp Business Platform): the same header, keyed with the
//     app secret (Meta's Graph API webhooks documentation);
//   - iFood: `X-IFood-Signature`, HMAC-SHA256 hex keyed with the client
//     secret (iFood Developer Portal, "Webhook signature").
func NewHMAC(header, prefix string, h crypto.Hash, enc Encoding, secrets []string) (Verifier, error) {
	sh, err := newSignedHeader(header, prefix, enc)
	if err != nil {
		return nil, err
	}
	if !h.Available() || h.Size() > sha512.Size {
		return nil, fmt.Errorf("hash %v is not available or longer than %d bytes", h, sha512.Size)
	}
	return &hmacVerifier{signedHeader: sh, keys: newHMACKeyring(h.New, rawSecrets(secrets))}, nil
}

// hmacVerifier is the scheme of NewHMAC.
type hmacVerifier struct {
	signedHeader
	keys keyring
}

// Verify implements Verifier.
func (v *hmacVerifier) Verify(r *http.Request, body []byte) error {
	var sigs sigSet
	if err := v.signatures(r, maxSignatures, &sigs); err != nil {
		return err
	}
	return v.keys.check(nil, body, &sigs)
}

// signedHeader is the header of a generic scheme: its name, the prefix
// of its values, and how signatures are written in it.
type signedHeader struct {
	header   string
	prefix   string
	encoding Encoding
}

func newSignedHeader(header, prefix string, enc Encoding) (signedHeader, error) {
	if header == "" {
		return signedHeader{}, errors.New("no header name")
	}
	if enc != Hex && enc != Base64 {
		return signedHeader{}, fmt.Errorf("unknown encoding %d", enc)
	}
	return signedHeader{header: http.CanonicalHeaderKey(header), prefix: prefix, encoding: enc}, nil
}

// signatures decodes into sigs the signatures of the header's values (at
// most limit of them); ErrMissing when the header is absent, or has only
// empty or blank values.
func (s *signedHeader) signatures(r *http.Request, limit int, sigs *sigSet) error {
	values, err := headerValues(r.Header, s.header)
	if err != nil {
		return err
	}
	eachSignature(values, s.prefix, limit, func(sig string) bool { return sigs.add(s.encoding, sig) })
	return nil
}

// eachSignature calls take with each value of a repeated signature
// header, trimmed and without prefix (a value without the prefix is
// skipped, when prefix is not empty), until take returns false or limit
// values were looked at.
func eachSignature(values []string, prefix string, limit int, take func(sig string) bool) {
	for i, val := range values {
		if i >= limit {
			return
		}
		if val = strings.TrimSpace(val); val == "" {
			continue // an empty value is no signature
		}
		if prefix != "" {
			var ok bool
			if val, ok = strings.CutPrefix(val, prefix); !ok {
				continue
			}
		}
		if !take(val) {
			return
		}
	}
}

// NewToken returns the generic token scheme: the named header carries one
// of tokens, after prefix when prefix is not empty (such as `Bearer `; a
// value without it is rejected). Tokens are compared in constant time as
// SHA-256 digests, so that a token's length does not leak either. A token
// signs nothing: it proves the sender knows it, not that the body is the
// one sent.
//
// Evolution API, for one, authenticates this way: a static header
// configured on the instance.
func NewToken(header, prefix string, tokens []string) (Verifier, error) {
	if header == "" {
		return nil, errors.New("no header name")
	}
	return &tokenVerifier{header: http.CanonicalHeaderKey(header), prefix: prefix, tokens: newTokenSet(tokens)}, nil
}

// tokenVerifier is the scheme of NewToken.
type tokenVerifier struct {
	header string
	prefix string
	tokens tokenSet
}

// Verify implements Verifier.
func (v *tokenVerifier) Verify(r *http.Request, _ []byte) error {
	val := headerValue(r.Header, v.header)
	if val == "" {
		return ErrMissing
	}
	if v.prefix != "" {
		var ok bool
		if val, ok = strings.CutPrefix(val, v.prefix); !ok {
			return ErrInvalid
		}
	}
	if !v.tokens.match(val) {
		return ErrInvalid
	}
	return nil
}

var (
	_ Verifier = (*hmacVerifier)(nil)
	_ Verifier = (*tokenVerifier)(nil)
)
