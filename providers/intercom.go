package providers

import "net/http"

// Intercom: `X-Hub-Signature: sha1=<hex>`, the HMAC-SHA1 of the body keyed
// with the app's client secret; the HEAD request with which Intercom
// checks an endpoint is answered.
func init() {
	register(&Preset{
		Name: "intercom",
		Docs: []string{
			"https://developers.intercom.com/docs/webhooks/setting-up-webhooks",
			"https://developers.intercom.com/docs/webhooks/webhook-notifications",
			"https://developers.intercom.com/intercom-api-reference/v1.0/reference/signed-notifications",
			"https://developers.intercom.com/docs/build-an-integration/learn-more/ip-allowlisting",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha1
			signature header:X-Hub-Signature prefix sha1=
		}`,
		// the notification's id; its body counts delivery attempts
		DefaultKey: []string{"json:id", "body"},
		Handshake:  &intercomHEAD,
	})
}

// intercomHEAD is the HEAD request Intercom sends to an endpoint to check
// it ("Setting up webhooks"): answered 200, with no body.
var intercomHEAD = Handshake{open: true, answer: func(_ *HandshakeState, r *http.Request, _ []byte) (HandshakeAnswer, bool) {
	return HandshakeAnswer{Status: http.StatusOK}, r.Method == http.MethodHead
}}
