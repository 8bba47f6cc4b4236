package webhookidempotency

import (
	"errors"

	"go.uber.org/zap"

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

// efiHMACParam is the query parameter of Efí's skip-mTLS token.
const efiHMACParam = "hmac"

// efiCADownload is where Efí publishes its production CA chain for
// webhooks; docs/providers.md says where the sandbox's is.
const efiCADownload = "https://certificados.efipay.com.br/webhooks/certificate-chain-prod.crt"

// newEfiVerifier builds the `efi` scheme: the `hmac` query token when
// secrets are given, else nothing to verify (the client certificate
// authenticates the delivery, efiEdge makes sure it is required).
func newEfiVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if len(cfg.Secrets) == 0 {
		return nil, nil
	}
	return signature.NewQueryToken(efiHMACParam, cfg.Secrets)
}

// efiEdge is the `efi` preset's rule for the edge options: Efí's client
// certificate is required (its CA given as client_cert's ca, since the
// module ships no copy of it), unless the route takes Efí's documented
// fallback without mutual TLS, which needs both the hmac token (secret)
// and an address allow list, as Efí recommends using both.
func efiEdge(h *Handler) error {
	if h.ClientCert != nil {
		if len(h.ClientCert.CA) == 0 {
			return errors.New("the efi preset needs client_cert's ca: Efí's CA chain, downloaded from " + efiCADownload + " (production) or the sandbox's (docs/providers.md: Efí)")
		}
		return nil
	}
	if h.Verify != nil && h.Verify.Scheme == "off" {
		return errors.New("the efi preset needs client_cert { ca <Efí's CA chain> }, or, without mutual TLS, a secret (the hmac token) and allow_ips: `verify off` leaves it with neither (docs/providers.md: Efí)")
	}
	hasToken := h.Verify != nil && len(h.Verify.Secrets) > 0
	if !hasToken || h.AllowIPs == nil {
		return errors.New("the efi preset needs client_cert { ca <Efí's CA chain from " + efiCADownload + "> }; without mutual TLS (Efí's skip-mTLS registration) it needs both a secret, the token of the URL's hmac parameter, and allow_ips with Efí's address (docs/providers.md: Efí)")
	}
	h.logger.Warn("efi without client_cert: Efí's fallback without mutual TLS, each delivery authenticated by the hmac token in its URL and its address only",
		zap.String("query_parameter", efiHMACParam))
	return nil
}
