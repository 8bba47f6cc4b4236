package webhookidempotency

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// stripeLikeBody is a Stripe-shaped event of about 2 KiB whose id is at
// data.object.id, after the event's own fields.
func stripeLikeBody() []byte {
	body := `{
  "id": "evt_3PqL2x2eZvKYlo2C1aBcDeFg",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1723449600,
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": "req_Xyz123AbC456", "idempotency_key": "3f1c7a52-5b1e-4d0e-9a7e-3c2b1a0f9e8d"},
  "type": "payment_intent.succeeded",
  "data": {
    "object": {
      "id": "pi_3PqL2x2eZvKYlo2C1HhIjKlM",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_details": {"tip": {}},
      "amount_received": 2000,
      "application": null,
      "application_fee_amount": null,
      "automatic_payment_methods": {"allow_redirects": "always", "enabled": true},
      "canceled_at": null,
      "cancellation_reason": null,
      "capture_method": "automatic_async",
      "client_secret": "pi_3PqL2x2eZvKYlo2C1HhIjKlM_secret_AbCdEfGhIjKlMnOpQrStUvWx",
      "confirmation_method": "automatic",
      "created": 1723449598,
      "currency": "usd",
      "customer": "cus_QhIjKlMnOpQrSt",
      "description": "Order #10042",
      "invoice": null,
      "last_payment_error": null,
      "latest_charge": "ch_3PqL2x2eZvKYlo2C1NnOoPpQ",
      "livemode": false,
      "metadata": {"order_id": "10042", "customer_email": "jenny.rosen@example.com", "cart_items": "3"},
      "next_action": null,
      "on_behalf_of": null,
      "payment_method": "pm_1PqL2w2eZvKYlo2CrStUvWxY",
      "payment_method_configuration_details": {"id": "pmc_1Nn2eZvKYlo2CabcdEFGH", "parent": null},
      "payment_method_options": {
        "card": {"installments": null, "mandate_options": null, "network": null, "request_three_d_secure": "automatic"},
        "link": {"persistent_token": null}
      },
      "payment_method_types": ["card", "link"],
      "processing": null,
      "receipt_email": "jenny.rosen@example.com",
      "review": null,
      "setup_future_usage": null,
      "shipping": {
        "address": {"city": "San Francisco", "country": "US", "line1": "510 Townsend St", "line2": null, "postal_code": "94103", "state": "CA"},
        "carrier": null, "name": "Jenny Rosen", "phone": null, "tracking_number": null
      },
      "source": null,
      "statement_descriptor": null,
      "statement_descriptor_suffix": null,
      "status": "succeeded",
      "transfer_data": null,
      "transfer_group": null
    },
    "previous_attributes": null
  }
}`
	return []byte(body)
}

// whatsAppLikeBody is a WhatsApp Cloud API message notification whose
// message id is at entry.0.changes.0.value.messages.0.id.
func whatsAppLikeBody() []byte {
	return []byte(`{
  "object": "whatsapp_business_account",
  "entry": [{
    "id": "102290129340398",
    "changes": [{
      "value": {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
        "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16505551234"}],
        "messages": [{
          "from": "16505551234",
          "id": "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
          "timestamp": "1749416383",
          "type": "text",
          "text": {"body": "Does it come in another color?"}
        }]
      },
      "field": "messages"
    }]
  }]
}`)
}

// BenchmarkResolveKey measures resolveKey alone for each kind of key
// source. The handler computes the body's SHA-256 for every request, before
// resolveKey, whatever the key source; "body" is resolveKey given that
// hash, "body+sha256" includes computing it.
func BenchmarkResolveKey(b *testing.B) {
	oneKiB := []byte(strings.Repeat("x", 1<<10))
	cases := []struct {
		name, source string
		body         []byte
		want         string
		hashInLoop   bool
	}{
		{"header", "header:Idempotency-Key", oneKiB, "3f1c7a52-5b1e-4d0e-9a7e-3c2b1a0f9e8d", false},
		{"json/stripe", "json:data.object.id", stripeLikeBody(), "pi_3PqL2x2eZvKYlo2C1HhIjKlM", false},
		{"json/whatsapp", "json:entry.0.changes.0.value.messages.0.id", whatsAppLikeBody(), "wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=", false},
		{"body", "body", oneKiB, "", false},
		{"body+sha256", "body", oneKiB, "", true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			sources, err := parseKeySources([]string{c.source})
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/hook", nil)
			r.Header.Set("Idempotency-Key", "3f1c7a52-5b1e-4d0e-9a7e-3c2b1a0f9e8d")
			hash := sha256.Sum256(c.body)
			want := c.want
			if want == "" {
				want = hashKey(&hash)
			}
			if got, _, _ := resolveKey(sources, r, c.body, &hash); got != want {
				b.Fatalf("resolveKey = %q, want %q", got, want)
			}
			if sources[0].kind != keyHeader {
				b.SetBytes(int64(len(c.body)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if c.hashInLoop {
					hash = sha256.Sum256(c.body)
				}
				if v, _, _ := resolveKey(sources, r, c.body, &hash); len(v) == 0 {
					b.Fatal("empty key")
				}
			}
		})
	}
}
