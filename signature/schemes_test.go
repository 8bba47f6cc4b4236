package signature_test

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// newScheme builds, with this package's constructors, the verifier the
// module's preset table builds for c.Scheme with c's options.
func newScheme(c sigtest.Case, tolerance time.Duration, secrets []string) (signature.Verifier, error) {
	secrets, public := c.Keys(secrets)
	switch c.Scheme {
	case "discord":
		keys, err := ed25519Keys(public)
		if err != nil {
			return nil, err
		}
		return signature.NewDiscord(keys, tolerance)
	case "woovi", "rsa":
		keys, err := rsaKeys(public)
		if err != nil {
			return nil, err
		}
		if c.Scheme == "woovi" {
			return signature.NewWoovi(keys)
		}
		h := map[string]crypto.Hash{"": crypto.SHA256, "sha256": crypto.SHA256, "sha512": crypto.SHA512}[c.Algorithm]
		padding := signature.PKCS1v15
		if c.Padding == "pss" {
			padding = signature.PSS
		}
		return signature.NewRSA(c.Header, c.Prefix, h, padding, encoding(c.Encoding, signature.Base64), keys)
	case "ed25519":
		keys, err := ed25519Keys(public)
		if err != nil {
			return nil, err
		}
		return signature.NewEd25519(c.Header, c.Prefix, encoding(c.Encoding, signature.Hex), keys)
	case "twitch":
		return signature.NewTwitch(secrets, tolerance), nil
	case "zoom":
		return signature.NewZoom(secrets, tolerance), nil
	case "linear":
		return signature.NewLinear(secrets, tolerance), nil
	case "razorpay":
		return signature.NewHMAC("X-Razorpay-Signature", "", crypto.SHA256, signature.Hex, secrets)
	case "hubspot":
		return signature.NewHubSpot(secrets, configuredURL(c.URL), tolerance), nil
	case "stripe":
		return signature.NewStripe(secrets, tolerance), nil
	case "paddle":
		return signature.NewPaddle(secrets, tolerance), nil
	case "slack":
		return signature.NewSlack(secrets, tolerance), nil
	case "standard":
		return signature.NewStandardWebhooks("webhook-", append(secrets, public...), tolerance)
	case "svix":
		return signature.NewStandardWebhooks("svix-", append(secrets, public...), tolerance)
	case "mercadopago":
		return signature.NewMercadoPago(secrets, tolerance), nil
	case "pagbank":
		return signature.NewPagBank(secrets), nil
	case "twilio":
		return signature.NewTwilio(secrets, configuredURL(c.URL)), nil
	case "square":
		return signature.NewSquare(secrets, configuredURL(c.URL)), nil
	case "gitlab":
		return signature.NewGitLab(secrets, tolerance)
	case "github", "whatsapp":
		return signature.NewHMAC("X-Hub-Signature-256", "sha256=", crypto.SHA256, signature.Hex, secrets)
	case "shopify":
		return signature.NewShopify(secrets), nil
	case "ifood":
		return signature.NewHMAC("X-IFood-Signature", "", crypto.SHA256, signature.Hex, secrets)
	case "hmac":
		h := map[string]crypto.Hash{"": crypto.SHA256, "sha1": crypto.SHA1, "sha256": crypto.SHA256, "sha512": crypto.SHA512}[c.Algorithm]
		return signature.NewHMAC(c.Header, c.Prefix, h, encoding(c.Encoding, signature.Hex), secrets)
	case "token":
		return signature.NewToken(c.Header, c.Prefix, secrets)
	case "evolution":
		if c.Header != "" {
			return signature.NewToken(c.Header, c.Prefix, secrets)
		}
		return signature.NewJWT("", "", secrets, tolerance)
	case "jwt":
		return signature.NewJWT(c.Header, c.Prefix, secrets, tolerance)
	case "asaas":
		return signature.NewToken("asaas-access-token", "", secrets)
	}
	return nil, fmt.Errorf("no constructor for scheme %s", c.Scheme)
}

// encoding maps a verify block's encoding to the package's, with a
// default.
func encoding(name string, def signature.Encoding) signature.Encoding {
	switch name {
	case "hex":
		return signature.Hex
	case "base64":
		return signature.Base64
	}
	return def
}

// ed25519Keys parses public keys with the package's parser.
func ed25519Keys(values []string) ([]ed25519.PublicKey, error) {
	keys := make([]ed25519.PublicKey, len(values))
	for i, v := range values {
		k, err := signature.ParseEd25519PublicKey(v)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// rsaKeys parses public keys with the package's parser.
func rsaKeys(values []string) ([]*rsa.PublicKey, error) {
	keys := make([]*rsa.PublicKey, len(values))
	for i, v := range values {
		k, err := signature.ParseRSAPublicKey(v)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// build is newScheme for sigtest.Run.
func build(c sigtest.Case) sigtest.Build {
	return func(t *testing.T, tolerance time.Duration, secrets ...string) signature.Verifier {
		t.Helper()
		v, err := newScheme(c, tolerance, secrets)
		if err != nil {
			t.Fatalf("%s: %v", c.Scheme, err)
		}
		return v
	}
}

// configuredURL is the public URL of a server told the URL the provider
// delivers to: u, with the request's query unless u has one.
func configuredURL(u string) signature.PublicURL {
	return func(dst []byte, r *http.Request) []byte {
		dst = append(dst, u...)
		if !strings.Contains(u, "?") && r.URL.RawQuery != "" {
			dst = append(append(dst, '?'), r.URL.RawQuery...)
		}
		return dst
	}
}

// TestVerifySchemes runs every scheme, configured as each preset
// configures it, through the checks of every signature scheme.
func TestVerifySchemes(t *testing.T) {
	for _, c := range sigtest.Cases() {
		t.Run(c.Label(), func(t *testing.T) { sigtest.Run(t, c, build(c)) })
	}
}

// Verify runs concurrently on one verifier; pooled hash states must not
// leak between requests.
func TestVerifyConcurrent(t *testing.T) {
	for _, c := range sigtest.Cases() {
		v := build(c)(t, signature.DefaultTolerance, c.Secrets[0], c.Secrets[1])
		good := c.Delivery(t, c.Secrets[1], time.Now())
		bad := c.Delivery(t, c.Secrets[2], time.Now())
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			go func() {
				for i := 0; i < 100; i++ {
					if err := v.Verify(good.Req, good.Body); err != nil {
						errs <- fmt.Errorf("%s: valid delivery rejected: %v", c.Scheme, err)
						return
					}
					if v.Verify(bad.Req, bad.Body) == nil {
						errs <- fmt.Errorf("%s: forged delivery accepted", c.Scheme)
						return
					}
				}
				errs <- nil
			}()
		}
		for g := 0; g < 8; g++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}
