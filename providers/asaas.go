package providers

// Asaas: `asaas-access-token`, a constant-time match of the token
// configured on the webhook; `in_flight wait` by default, since Asaas
// counts a 409 as one of the 15 failures that pause its queue.
func init() {
	register(&Preset{
		Name: "asaas",
		Docs: []string{
			"https://docs.asaas.com/docs/receba-eventos-do-asaas-no-seu-endpoint-de-webhook",
		},
		DefaultKey: []string{"json:id", "body"},
		scheme:     fixedToken("asaas-access-token"),
		InFlight:   "wait",
		// a shared token: no body is signed
		BodyUnsigned: true,
		Credentials:  []string{"asaas-access-token"},
		signer:       tokenSigner("asaas", "asaas-access-token"),
	})
}
