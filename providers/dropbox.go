package providers

// Dropbox: `X-Dropbox-Signature`, the HMAC-SHA256 hex of the body with the
// app secret; a notification names only the accounts that changed, so the
// body is the key. Dropbox checks an endpoint with a GET `?challenge=`
// answered at the edge.
func init() {
	register(&Preset{
		Name: "dropbox",
		Docs: []string{
			"https://www.dropbox.com/developers/reference/webhooks",
			"https://github.com/dropbox/mdwebhook/blob/1b32d5aec51019eb698905345a21af46e0d4be8e/app.py",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Dropbox-Signature
		}`,
		// a notification carries no id, only the accounts that changed
		DefaultKey: []string{"body"},
		Handshake:  &challengeEcho,
	})
}
