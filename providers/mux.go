package providers

// Mux: `Mux-Signature: t=<s>,v1=<hex>[,v1=…]`, the HMAC-SHA256 of
// `{t}.{body}` with the webhook's signing secret. A retry's body lists the
// attempts made so far, so the event's id is the key.
func init() {
	register(&Preset{
		Name: "mux",
		Docs: []string{
			"https://github.com/muxinc/mux-node-sdk/blob/89eff086c11d1f0e37dc7841254988160033ffc3/src/resources/webhooks/webhooks.ts",
		},
		Block: `template {
			string    "{timestamp}.{body}"
			algorithm hmac-sha256
			signature header:Mux-Signature separator , prefix v1=
			timestamp header:Mux-Signature separator , prefix t=
		}`,
		DefaultKey: []string{"json:id", "body"},
		Volatile:   []string{"Mux-Signature"},
	})
}
