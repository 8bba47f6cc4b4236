package signature

import (
	"errors"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// NewQueryToken returns the scheme of a shared token sent in the query of
// the URL the provider delivers to, such as the `hmac` parameter Efí
// documents for Pix webhooks without mutual TLS (`…/webhook?hmac=<token>`):
// the first value of param must be one of the tokens. Tokens are compared
// as SHA-256 digests, in constant time. The token proves who knows the URL,
// not what the body says: it signs nothing.
func NewQueryToken(param string, tokens []string) (Verifier, error) {
	if param == "" {
		return nil, errors.New("no query parameter name")
	}
	if len(tokens) == 0 {
		return nil, errors.New("no token")
	}
	return &queryTokenVerifier{param: param, tokens: newTokenSet(tokens)}, nil
}

// queryTokenVerifier is the scheme of NewQueryToken.
type queryTokenVerifier struct {
	param  string
	tokens tokenSet
}

// Verify implements Verifier.
func (v *queryTokenVerifier) Verify(r *http.Request, _ []byte) error {
	val := query.Value(r.URL.RawQuery, v.param)
	if val == "" {
		return ErrMissing
	}
	if !v.tokens.match(val) {
		return ErrInvalid
	}
	return nil
}

var _ Verifier = (*queryTokenVerifier)(nil)

// NewQueryTokenSigner returns the signing side of NewQueryToken: it sets
// param in the request URL's query to the token, as a provider that was
// given the URL with its token sends it.
func NewQueryTokenSigner(param, token string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		q := r.URL.Query()
		q.Set(param, token)
		r.URL.RawQuery = q.Encode()
		return body, nil
	})
}
