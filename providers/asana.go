package providers

// Asana: `X-Hook-Signature`, the HMAC-SHA256 hex of the body with the
// secret Asana sent in the webhook's handshake (`X-Hook-Secret`). Events
// carry no id, so the body is the key. The handshake, which carries the
// secret itself, is not answered here (docs/providers.md: More presets).
func init() {
	register(&Preset{
		Name: "asana",
		Docs: []string{
			"https://developers.asana.com/reference/createwebhook",
			"https://developers.asana.com/docs/webhooks-guide",
			"https://github.com/Asana/devrel-examples/blob/7f1833450aff98d52d21884d003e68f7dc5bbce4/javascript/webhooks-nodejs/index.js",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Hook-Signature
		}`,
		// a request's events carry no id: it is deduplicated whole
		DefaultKey: []string{"body"},
	})
}
