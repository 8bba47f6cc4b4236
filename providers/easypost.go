package providers

// EasyPost: `X-Hmac-Signature: hmac-sha256-hex=<hex>`, the HMAC-SHA256 of
// the body keyed with the webhook's secret in Unicode NFKD form, as
// EasyPost's client libraries key it.
func init() {
	register(&Preset{
		Name: "easypost",
		Docs: []string{
			"https://github.com/EasyPost/easypost-go/blob/6e06a9052613a75865f415b44694773d9e169ade/webhook.go",
			"https://github.com/EasyPost/examples/blob/112a6d19063aa98934231fc436067d5016da2015/official/fixtures/client-library-fixtures.json",
		},
		Block: `template {
			string          "{body}"
			algorithm       hmac-sha256
			signature       header:X-Hmac-Signature prefix hmac-sha256-hex=
			secret_encoding nfkd
		}`,
		DefaultKey: []string{"json:id", "body"},
	})
}
