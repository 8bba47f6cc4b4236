package signature

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// NewGitLab returns GitLab's scheme: the secret token in `X-Gitlab-Token`,
// compared in constant time; secrets that start with `whsec_` are signing
// tokens instead, checked as Standard Webhooks on the `webhook-*` headers
// (within tolerance, DefaultTolerance when zero). A request with a
// `webhook-signature` header is checked against the signing tokens;
// otherwise `X-Gitlab-Token` is checked against the plain tokens. With
// both kinds configured, either proof is accepted; with signing tokens
// only, `X-Gitlab-Token` alone is ErrMissing. It follows GitLab's webhook
// documentation (secret tokens, and signing tokens in the Standard
// Webhooks format).
func NewGitLab(secrets []string, tolerance time.Duration) (Verifier, error) {
	var tokens, signing []string
	for _, s := range secrets {
		if strings.HasPrefix(s, "whsec_") {
			signing = append(signing, s)
		} else {
			tokens = append(tokens, s)
		}
	}
	v := &gitLabVerifier{tokens: newTokenSet(tokens)}
	if len(signing) > 0 {
		std, err := newStandardWebhooks("webhook-", signing, tolerance)
		if err != nil {
			return nil, errors.New("a secret starting with whsec_ is not a valid signing token (whsec_ followed by base64)")
		}
		v.standard = std
	}
	return v, nil
}

// gitLabVerifier is the scheme of NewGitLab.
type gitLabVerifier struct {
	tokens   tokenSet
	standard *standardWebhooks
}

// Verify implements Verifier.
func (v *gitLabVerifier) Verify(r *http.Request, body []byte) error {
	if v.standard != nil && headerValue(r.Header, "Webhook-Signature") != "" {
		return v.standard.Verify(r, body)
	}
	token := headerValue(r.Header, "X-Gitlab-Token")
	if token == "" || len(v.tokens) == 0 {
		return ErrMissing
	}
	if !v.tokens.match(token) {
		return ErrInvalid
	}
	return nil
}

var _ Verifier = (*gitLabVerifier)(nil)
