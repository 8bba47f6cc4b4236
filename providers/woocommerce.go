package providers

import (
	"net/http"
	"strings"
)

// WooCommerce: `X-WC-Webhook-Signature`, the HMAC-SHA256 base64 of the
// body keyed with the webhook's secret as WordPress decodes it
// (wp_specialchars_decode, ENT_QUOTES: `&amp;` is `&`); the unsigned ping
// WooCommerce sends when a webhook is activated is answered.
func init() {
	register(&Preset{
		Name: "woocommerce",
		Docs: []string{
			"https://github.com/woocommerce/woocommerce/blob/trunk/plugins/woocommerce/includes/class-wc-webhook.php",
			"https://github.com/woocommerce/woocommerce/blob/trunk/plugins/woocommerce/includes/admin/class-wc-admin-webhooks.php",
			"https://developer.woocommerce.com/docs/apis/rest-api/v3/webhooks/",
			"https://developer.wordpress.org/reference/functions/wp_specialchars_decode/",
		},
		Block: `template {
			string          "{body}"
			algorithm       hmac-sha256
			signature       header:X-WC-Webhook-Signature encoding base64
			secret_encoding html_specialchars
		}`,
		// no event id: X-WC-Webhook-Delivery-ID is new on every delivery,
		// and a body is the resource as it is after the change
		DefaultKey: []string{"body"},
		Handshake:  &wooCommercePing,
	})
}

// wooCommercePing is the request WC_Webhook::deliver_ping sends when a
// webhook is activated: a POST of `webhook_id=<id>`, unsigned, with
// WooCommerce's User-Agent and none of the X-WC-Webhook headers. WooCommerce
// takes only a 200 (anything else leaves the webhook pending and shows an
// error). It is recognised without reading the body: nothing in it is
// used, and the answer triggers nothing.
var wooCommercePing = Handshake{open: true, answer: answerWooCommercePing}

// wooCommercePingMax is the longest `webhook_id=<id>`: a 64-bit id.
const wooCommercePingMax = len("webhook_id=") + 20

func answerWooCommercePing(_ *HandshakeState, r *http.Request, _ []byte) (HandshakeAnswer, bool) {
	if r.Method != http.MethodPost || r.ContentLength < int64(len("webhook_id=1")) || r.ContentLength > int64(wooCommercePingMax) {
		return HandshakeAnswer{}, false
	}
	if len(r.Header["X-Wc-Webhook-Signature"]) > 0 || len(r.Header["X-Wc-Webhook-Topic"]) > 0 {
		return HandshakeAnswer{}, false
	}
	// `WooCommerce/<version> Hookshot (WordPress/<version>)`
	ua := r.Header.Get("User-Agent")
	if !strings.HasPrefix(ua, "WooCommerce/") || !strings.Contains(ua, " Hookshot (WordPress/") {
		return HandshakeAnswer{}, false
	}
	return HandshakeAnswer{Status: http.StatusOK}, true
}
