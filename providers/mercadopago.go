package providers

import (
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Mercado Pago: `x-signature: ts=…,v1=…` over
// `id:{data.id};request-id:{x-request-id};ts:{ts};` (docs/providers.md:
// Mercado Pago); the manifest signs ids, not the body.
func init() {
	register(&Preset{
		Name:    "mercadopago",
		Timeout: 22 * time.Second,
		Docs: []string{
			"https://www.mercadopago.com.br/developers/en/docs/your-integrations/notifications/webhooks",
		},
		DefaultKey: []string{"json:id", "body"},
		scheme:     withTolerance(signature.NewMercadoPago),
		Volatile:   []string{"x-signature", "x-request-id"},
		TTL:        4 * day, // the last retry comes 4 days after the first
		// the manifest signs data.id, x-request-id and ts, not the body
		BodyUnsigned: true,
		Credentials:  []string{"x-signature"},
		resigns:      always,
		signer:       secretSigner(signature.NewMercadoPagoSigner),
	})
}
