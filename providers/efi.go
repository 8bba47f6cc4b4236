package providers

import (
	"time"

	"errors"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Efí Bank (formerly Gerencianet) Pix webhooks (docs/providers.md: Efí):
// Efí signs nothing. It authenticates itself at the TLS layer, with a
// client certificate issued under the CA chain it publishes, and first
// probes the endpoint without one, a probe that must be refused. For
// endpoints that cannot do mutual TLS, Efí documents a fallback
// (`x-skip-mtls-checking: true` when the webhook is registered): the URL
// carries a token of the receiver's choosing in its `hmac` query
// parameter, and Efí recommends accepting only its address as well.
func init() {
	register(&Preset{
		Name:    "efi",
		Timeout: 60 * time.Second,
		Docs: []string{
			"https://dev.efipay.com.br/docs/api-pix/webhooks",
		},
		// Pix callbacks carry no id of their own: a callback is a batch
		// (`pix` is an array), and a refund's callback repeats the
		// endToEndId of the Pix it refunds (docs/providers.md: Efí)
		DefaultKey: []string{"body"},
		scheme: scheme{
			// the hmac query token when secrets are given, else nothing to
			// verify (the client certificate authenticates the delivery,
			// efiEdge makes sure it is required)
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				if len(cfg.Secrets) == 0 {
					return nil, nil
				}
				return signature.NewQueryToken(EfiHMACParam, cfg.Secrets)
			},
			keysOptional: true,
		},
		TTL:          4 * day, // 10 retries, the last about 85 hours after the first failure
		BodyUnsigned: true,
		Edge:         efiEdge,
		// Efí signs nothing: the skip-mTLS token goes in the URL's hmac
		// parameter (with mutual TLS, the client certificate is the proof,
		// which the send command does not present)
		CredentialQuery: []string{EfiHMACParam},
		signer: presetSigner{needs: needsSecret + " (the hmac token of Efí's fallback without mutual TLS)", build: func(cfg SignConfig) (signature.Signer, error) {
			return withSecret(cfg, func(s string) signature.Signer { return signature.NewQueryTokenSigner(EfiHMACParam, s) })
		}},
	})
}

// EfiHMACParam is the query parameter of Efí's skip-mTLS token.
const EfiHMACParam = "hmac"

// efiCADownload is where Efí publishes its production CA chain for
// webhooks; docs/providers.md says where the sandbox's is.
const efiCADownload = "https://certificados.efipay.com.br/webhooks/certificate-chain-prod.crt"

// efiEdge is the `efi` preset's rule for the edge options: Efí's client
// certificate is required (its CA given as client_cert's ca, since the
// module ships no copy of it), unless the route takes Efí's documented
// fallback without mutual TLS, which needs both the hmac token (secret)
// and an address allow list, as Efí recommends using both.
func efiEdge(e EdgeConfig) (string, error) {
	if e.ClientCert {
		if e.ClientCertCAs == 0 {
			return "", errors.New("the efi preset needs client_cert's ca: Efí's CA chain, downloaded from " + efiCADownload + " (production) or the sandbox's (docs/providers.md: Efí)")
		}
		return "", nil
	}
	if e.VerifyOff {
		return "", errors.New("the efi preset needs client_cert { ca <Efí's CA chain> }, or, without mutual TLS, a secret (the hmac token) and allow_ips: `verify off` leaves it with neither (docs/providers.md: Efí)")
	}
	if e.Secrets == 0 || !e.AllowIPs {
		return "", errors.New("the efi preset needs client_cert { ca <Efí's CA chain from " + efiCADownload + "> }; without mutual TLS (Efí's skip-mTLS registration) it needs both a secret, the token of the URL's hmac parameter, and allow_ips with Efí's address (docs/providers.md: Efí)")
	}
	return "efi without client_cert: Efí's fallback without mutual TLS, each delivery authenticated by the hmac token in its URL (query parameter " + EfiHMACParam + ") and its address only", nil
}
