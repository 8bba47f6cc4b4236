package providers

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// easypostBody is EasyPost's shared fixture, official/fixtures/
// event-body.json of EasyPost/examples (at 112a6d19), without its final
// line feed as the client libraries read it; client-library-fixtures.json
// there gives its signature under the secret "sécret":
// `hmac-sha256-hex=38f3f53c…`. EasyPost's Go client (easypost-go v5.8.1,
// ValidateWebhook) keys the HMAC with `norm.NFKD.String(webhookSecret)`;
// it is not on the module proxy, so the vector is replayed here.
const easypostBody = `{"description":"tracker.updated","mode":"production","previous_attributes":{"status":"in_transit"},"created_at":"2024-08-02T19:26:52.000Z","pending_urls":["https://example.com/easypost"],"completed_urls":[],"updated_at":"2024-08-02T19:26:52.000Z","id":"evt_1","user_id":"user_1","status":"pending","object":"Event","result":{"id":"trk_1","object":"Tracker","mode":"production","tracking_code":"1","status":"in_transit","status_detail":"arrived_at_facility","created_at":"2024-07-31T14:45:27Z","updated_at":"2024-08-02T19:26:51Z","signed_by":null,"weight":614.4,"est_delivery_date":"2024-08-05T00:00:00Z","shipment_id":null,"carrier":"FedEx","tracking_details":[{"object":"TrackingDetail","message":"Shipment information sent to FedEx","description":"Shipment information sent to FedEx","status":"pre_transit","status_detail":"label_created","datetime":"2024-07-31T15:00:00Z","source":"FedEx","carrier_code":"OC","tracking_location":{"object":"TrackingLocation","city":null,"state":null,"country":"US","zip":"32837"}},{"object":"TrackingDetail","message":"Picked up","description":"Picked up","status":"in_transit","status_detail":"arrived_at_facility","datetime":"2024-07-31T19:27:00Z","source":"FedEx","carrier_code":"PU","tracking_location":{"object":"TrackingLocation","city":"ORLANDO","state":"FL","country":"US","zip":"32809"}},{"object":"TrackingDetail","message":"Arrived at FedEx location","description":"Arrived at FedEx location","status":"in_transit","status_detail":"arrived_at_facility","datetime":"2024-07-31T22:35:00Z","source":"FedEx","carrier_code":"AR","tracking_location":{"object":"TrackingLocation","city":"ORLANDO","state":"FL","country":"US","zip":"32809"}},{"object":"TrackingDetail","message":"Departed FedEx location","description":"Departed FedEx location","status":"in_transit","status_detail":"departed_facility","datetime":"2024-08-01T14:42:13Z","source":"FedEx","carrier_code":"DP","tracking_location":{"object":"TrackingLocation","city":"ORLANDO","state":"FL","country":"US","zip":"32809"}},{"object":"TrackingDetail","message":"On the way","description":"On the way","status":"in_transit","status_detail":"unknown","datetime":"2024-08-02T02:46:19Z","source":"FedEx","carrier_code":"IT","tracking_location":{"object":"TrackingLocation","city":"KENLY","state":"NC","country":"US","zip":"27542"}},{"object":"TrackingDetail","message":"On the way","description":"On the way","status":"in_transit","status_detail":"unknown","datetime":"2024-08-02T18:35:20Z","source":"FedEx","carrier_code":"IT","tracking_location":{"object":"TrackingLocation","city":"EDISON TWP","state":"NJ","country":"US","zip":"08817"}},{"object":"TrackingDetail","message":"Arrived at FedEx location","description":"Arrived at FedEx location","status":"in_transit","status_detail":"arrived_at_facility","datetime":"2024-08-02T18:50:00Z","source":"FedEx","carrier_code":"AR","tracking_location":{"object":"TrackingLocation","city":"EDISON","state":"NJ","country":"US","zip":"08817"}}],"carrier_detail":{"object":"CarrierDetail","service":"FEDEX_GROUND","container_type":null,"est_delivery_date_local":"2024-08-05","est_delivery_time_local":null,"origin_location":"ORLANDO FL US","origin_tracking_location":{"object":"TrackingLocation","city":"ORLANDO","state":"FL","country":"US","zip":"32809"},"destination_location":"BROOKLYN HGTS NY US","destination_tracking_location":null,"guaranteed_delivery_date":null,"alternate_identifier":null,"initial_delivery_attempt":null},"finalized":false,"is_return":false,"public_url":"https://track.easypost.com/1"}}`

func TestEasyPost(t *testing.T) {
	const secret = "s\u00e9cret" // é as one code point, as written in the fixture
	const header = "hmac-sha256-hex=38f3f53c103713df81616a0a186d77141957323ec21d5fe9363db93840f527db"
	body := []byte(easypostBody)
	if len(body) != 3550 {
		t.Fatalf("the fixture is 3550 bytes, not %d", len(body))
	}
	rt := route{secrets: []string{secret}}
	rt.check(t, "easypost", post("X-Hmac-Signature", header), body, nil)
	// the key as typed (NFC) is not EasyPost's
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	nfc := "hmac-sha256-hex=" + hex.EncodeToString(m.Sum(nil))
	rt.check(t, "easypost", post("X-Hmac-Signature", nfc), body, signature.ErrInvalid)
	// the secret given already decomposed is the same key
	route{secrets: []string{"se\u0301cret"}}.check(t, "easypost", post("X-Hmac-Signature", header), body, nil)
	rt.check(t, "easypost", post("X-Hmac-Signature", header), changeByte(body), signature.ErrInvalid)
	rt.check(t, "easypost", post("X-Hmac-Signature", header[len("hmac-sha256-hex="):]), body, signature.ErrInvalid)
	route{secrets: []string{"secret"}}.check(t, "easypost", post("X-Hmac-Signature", header), body, signature.ErrInvalid)
	if k := keyOf(t, "easypost", post(), body); k != "json:id=evt_1" {
		t.Fatalf("key %q", k)
	}
}
