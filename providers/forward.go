package providers

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// What a route hands to the application (internal/forward): which headers
// carry each scheme's signature, and how a delivery is signed again as its
// provider signs it, with the secret that verified it and the time of the
// attempt (docs/inbox.md: What the application receives).

// Credentials returns the headers and query parameters that carry a
// scheme's signature or credential under cfg.
func Credentials(cfg VerifyConfig) (headers, query []string) {
	switch cfg.Scheme {
	case "token":
		if cfg.Query != "" {
			return nil, []string{cfg.Query}
		}
		return []string{cfg.Header}, nil
	case "hmac", "ed25519", "rsa":
		return []string{cfg.Header}, nil
	case "jwt":
		if cfg.Header != "" {
			return []string{cfg.Header}, nil
		}
		return []string{"Authorization"}, nil
	}
	p, ok := presets[cfg.Scheme]
	if !ok {
		return nil, nil
	}
	headers, query = p.Credentials, p.CredentialQuery
	if cfg.Header != "" {
		// a preset whose header is configured (evolution's token)
		headers = append(headers[:len(headers):len(headers)], cfg.Header)
	}
	if cfg.Query != "" {
		// a preset whose query parameter is configured (eventgrid's key)
		query = append(query[:len(query):len(query)], cfg.Query)
	}
	return headers, query
}

// always is the resigns rule of a preset that always re-signs.
func always(VerifyConfig) bool { return true }

// ErrNoResign is the error of `forward signature resign` on a scheme that
// cannot be re-signed.
var ErrNoResign = errors.New("cannot be re-signed: it verifies with a public key or a token, or signs a timestamp inside the body; forward with `signature edge <secret>` (a Standard Webhooks signature any Standard Webhooks library verifies) or `keep`")

// Resigns reports whether a route's scheme can be re-signed: the default of
// `forward signature` for inbox deliveries and redeliveries is resign where
// it can, else keep.
func Resigns(cfg VerifyConfig) bool {
	switch cfg.Scheme {
	case "hmac":
		return len(cfg.Secrets) > 0
	case "token", "jwt", "ed25519", "rsa", "", "off":
		return false
	}
	p, ok := presets[cfg.Scheme]
	return ok && p.resigns != nil && len(cfg.Secrets) > 0 && p.resigns(cfg)
}

// NewResigner returns the function that signs a delivery again as the
// route's scheme does, with each of the route's secrets (resolved in cfg)
// by index; ErrNoResign when the scheme cannot be re-signed.
func NewResigner(cfg VerifyConfig) (func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error, error) {
	if !Resigns(cfg) {
		return nil, fmt.Errorf("%s %w", cfg.Scheme, ErrNoResign)
	}
	build := func(secret, publicURL string) (signature.Signer, error) {
		if cfg.Scheme == "hmac" {
			h, err := HashFunc(cfg.Algorithm)
			if err != nil {
				return nil, err
			}
			enc, err := ParseEncoding(cfg.Encoding)
			if err != nil {
				return nil, err
			}
			return signature.NewHMACSigner(cfg.Header, cfg.Prefix, h, enc, secret)
		}
		p := presets[cfg.Scheme]
		return p.signer.build(SignConfig{Secret: secret, PublicURL: publicURL, TokenHeader: cfg.Header})
	}
	// signers of the URL-free schemes are built once; those that sign the
	// public URL, per delivery
	signsURL := false
	if p, ok := presets[cfg.Scheme]; ok {
		signsURL = p.scheme.options&optURL != 0
	}
	// a secret that cannot sign (a Standard Webhooks whpk_ public key
	// given as a secret) has no signer: its deliveries are re-signed with
	// the first secret that can
	signers := make([]signature.Signer, len(cfg.Secrets))
	first := -1
	for i, s := range cfg.Secrets {
		signer, err := build(s, "https://example.invalid/")
		if err != nil {
			continue
		}
		if !signsURL {
			signers[i] = signer
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return nil, fmt.Errorf("%s %w", cfg.Scheme, ErrNoResign)
	}
	usable := func(i int) bool {
		_, err := build(cfg.Secrets[i], "https://example.invalid/")
		return err == nil
	}
	configuredURL := cfg.URL
	return func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error {
		if secret < 0 || secret >= len(cfg.Secrets) || (signers[secret] == nil && !usable(secret)) {
			// the secrets changed since the delivery was verified, or that
			// one cannot sign: the first that can is the route's current
			secret = first
		}
		signer := signers[secret]
		if signsURL {
			if configuredURL != "" {
				publicURL = configuredURL
			}
			var err error
			if signer, err = build(cfg.Secrets[secret], publicURL); err != nil {
				return err
			}
		}
		out, err := signer.Sign(r, body, at)
		if err != nil {
			return err
		}
		if len(out) != len(body) {
			return errors.New("the scheme's signer changed the body")
		}
		return nil
	}, nil
}
