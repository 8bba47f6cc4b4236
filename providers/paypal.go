package providers

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// PayPal's REST webhooks: `PAYPAL-TRANSMISSION-SIG`, an RSA-SHA256
// signature (the algorithm `PAYPAL-AUTH-ALGO` names, SHA256withRSA) of
// `{transmission id}|{transmission time}|{webhook id}|{CRC-32 of the
// body, decimal}`, made with the key of the certificate at
// `PAYPAL-CERT-URL` ("Integrate webhooks": self verification;
// PayPal-Java-SDK, Event.validateReceivedEvent). The webhook id is the
// route's: the ID of the webhook the listener URL is subscribed as.
//
// PayPal publishes no list of the hosts its certificates are served from
// and its SDKs check none (the Java SDK downloads any URL and checks the
// chain to a bundled DigiCert intermediate): the hosts and path below are
// those PayPal's API answers on and its certificate URLs take, and the
// certificate must be named messageverificationcerts[.sandbox].paypal.com
// (as the Java SDK requires of its CN).
func init() {
	register(&Preset{
		Name: "paypal",
		Docs: []string{
			"https://developer.paypal.com/api/rest/webhooks/rest/",
			"https://developer.paypal.com/api/webhooks/v1/definitions/verify_webhook_signature",
			"https://github.com/paypal/PayPal-Java-SDK/blob/2a34212256626707c89d9c0d9ac7bcdb5935fa5e/rest-api-sdk/src/main/java/com/paypal/api/payments/Event.java",
			"https://github.com/paypal/PayPal-Java-SDK/blob/2a34212256626707c89d9c0d9ac7bcdb5935fa5e/rest-api-sdk/src/main/java/com/paypal/base/SSLUtil.java",
		},
		Block: `template {
			string    "{header.Paypal-Transmission-Id}|{header.Paypal-Transmission-Time}|{webhook_id}|{body.crc32}"
			algorithm header:Paypal-Auth-Algo {
				SHA256withRSA rsa-sha256
			}
			signature header:Paypal-Transmission-Sig encoding base64
			cert_url  header:Paypal-Cert-Url {
				hosts    api(-m)?(\.sandbox)?\.paypal\.com
				paths    /v1/notifications/certs/[^/]+
				subjects messageverificationcerts(\.sandbox)?\.paypal\.com
				trust    origin
			}
		}`,
		// the event id, which a retry and a resend keep (its links name
		// /v1/notifications/webhooks-events/{id}/resend)
		DefaultKey: []string{"json:id", "body"},
		// "PayPal will retry each delivery up to 25 times over 3 days"
		TTL:      4 * day,
		Volatile: []string{"Paypal-Transmission-Id", "Paypal-Transmission-Time", "Paypal-Transmission-Sig"},
		signer:   presetSigner{needs: needsRSAKey + " and --webhook-id", build: signPayPal},
	})
}

// signPayPal signs as PayPal does: a transmission id and time of its own,
// SHA256withRSA, with the route's webhook id. The certificate URL is the
// sender's to set (--header Paypal-Cert-Url: …).
func signPayPal(cfg SignConfig) (signature.Signer, error) {
	if cfg.PrivateKey == "" || cfg.WebhookID == "" {
		return nil, errors.New("paypal signs with --private-key (an RSA key whose certificate PAYPAL-CERT-URL serves) and --webhook-id")
	}
	key, err := signature.ParseRSAPrivateKey(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("--private-key: %v", err)
	}
	decl := *presets["paypal"].decl
	decl.WebhookID = cfg.WebhookID
	tc, err := decl.templateConfig()
	if err != nil {
		return nil, err
	}
	s, err := signature.NewTemplateSigner(tc, key)
	if err != nil {
		return nil, err
	}
	return signature.SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		var id [16]byte
		_, _ = rand.Read(id[:])
		r.Header.Set("Paypal-Transmission-Id", fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]))
		r.Header.Set("Paypal-Transmission-Time", at.UTC().Format(time.RFC3339))
		r.Header.Set("Paypal-Auth-Algo", "SHA256withRSA")
		return s.Sign(r, body, at)
	}), nil
}
