package providers

import (
	"errors"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Pix webhooks as the Banco Central do Brasil's API Pix specifies them
// (bacen/pix-api, openapi.yaml: the `listaPix` callback, `POST
// {webhookUrl}/pix`): the receiving PSP posts `{"pix":[…]}` and signs
// nothing; the callback is "protegido por uma camada de autenticação
// mTLS", so the PSP's TLS client certificate is the only proof. A PSP
// with a preset of its own (efi) documents its CA and probes; this one
// takes the CA of the route's PSP.
func init() {
	register(&Preset{
		Name: "pix",
		Docs: []string{
			"https://github.com/bacen/pix-api/blob/1f1b568f6adf5b55a6268efbaf62802a14b01941/openapi.yaml",
			"https://www.bcb.gov.br/estabilidadefinanceira/pix",
		},
		// a callback is a batch (the PSP "pode agrupar Pix associados a
		// uma mesma chave"), and a refund reaching DEVOLVIDO or
		// NAO_REALIZADO calls back with the Pix's endToEndId again
		// (bacen/pix-api, openapi.yaml, callback listaPix): a Pix is known
		// by its endToEndId and its refunds (devolucoes, as sent: ids and
		// statuses), so a refund's callback is a new item and a retry of
		// either the same one
		DefaultKey: []string{"body"},
		Batch:      &Batch{Path: "json:pix", Key: []string{"json:endToEndId+json:devolucoes", "body"}},
		// the callback's one documented answer
		Success: &Answer{Status: 200},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				if len(cfg.Secrets) > 0 {
					return nil, errors.New("the pix preset takes no secret: a Pix webhook carries no signature nor token, the PSP's client certificate is its proof (client_cert)")
				}
				return nil, nil
			},
			keysOptional: true,
		},
		BodyUnsigned: true,
		Edge:         pixEdge,
		signer:       presetSigner{none: "a Pix webhook carries no signature: it is authenticated by the PSP's TLS client certificate, which this command does not present (send it with curl --cert)"},
	})
}

// pixEdge is the `pix` preset's rule for the edge options: the PSP's
// client certificate is the only authentication, so it is required, with
// the CA it must chain to.
func pixEdge(e EdgeConfig) (string, error) {
	switch {
	case !e.ClientCert:
		return "", errors.New("the pix preset needs client_cert { ca <your PSP's CA chain> }: a Pix webhook carries no signature, the PSP's TLS client certificate is its only proof (docs/providers.md: Pix)")
	case e.ClientCertCAs == 0:
		return "", errors.New("the pix preset needs client_cert's ca: the CA chain of your PSP's client certificate (docs/providers.md: Pix)")
	}
	return "", nil
}
