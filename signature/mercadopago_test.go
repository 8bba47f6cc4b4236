package signature_test

import (
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The values of Mercado Pago's own SDK test (mercadopago/sdk-nodejs,
// src/utils/webhook/webhook.spec.ts): an order id with capital letters.
// The SDK signs `data.id` as received since commit ac20999 ("preserve
// data.id case in signature manifest": Mercado Pago signs the original
// casing); the older documentation lower-cased it.
const (
	mpSDKSecret    = "your_secret_key_here"
	mpSDKRequestID = "2066ca19-c6f1-498a-be75-1923005edd06"
	mpSDKDataID    = "ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"
	mpSDKTS        = "1742505638"
)

// mpSDKManifest is the SDK's buildManifest.
func mpSDKManifest(dataID, requestID, ts string) string {
	m := ""
	if dataID != "" {
		m += "id:" + dataID + ";"
	}
	if requestID != "" {
		m += "request-id:" + requestID + ";"
	}
	return m + "ts:" + ts + ";"
}

func mpSDKDelivery(t *testing.T, query, signedID string) *sigtest.Delivery {
	t.Helper()
	d := sigtest.NewDelivery("/mp?data.id="+query+"&type=order", []byte(`{"action":"order.processed","data":{"id":"`+query+`"}}`), time.Time{})
	d.Req.Header.Set("x-request-id", mpSDKRequestID)
	d.Req.Header.Set("x-signature", "ts="+mpSDKTS+",v1="+sigtest.HMACHex(mpSDKSecret, mpSDKManifest(signedID, mpSDKRequestID, mpSDKTS)))
	return d
}

func TestVerifyMercadoPagoDataIDCase(t *testing.T) {
	signature.SetClock(t, time.Unix(1742505638, 0))
	v := signature.NewMercadoPago([]string{mpSDKSecret}, 0)
	t.Run("upper-case id signed as received", func(t *testing.T) {
		d := mpSDKDelivery(t, mpSDKDataID, mpSDKDataID)
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("upper-case id signed lower-cased (older documentation)", func(t *testing.T) {
		d := mpSDKDelivery(t, mpSDKDataID, "ord01jq4s4ky8hwq6na5pxb65b3d3")
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("lower-case id", func(t *testing.T) {
		d := mpSDKDelivery(t, "ord01jq4s4ky8hwq6na5pxb65b3d3", "ord01jq4s4ky8hwq6na5pxb65b3d3")
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
	})
	t.Run("lower-case id is not tried upper-cased", func(t *testing.T) {
		d := mpSDKDelivery(t, "ord01jq4s4ky8hwq6na5pxb65b3d3", mpSDKDataID)
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	})
	t.Run("another id's signature", func(t *testing.T) {
		d := mpSDKDelivery(t, mpSDKDataID, "ORD01JQ4S4KY8HWQ6NA5PXB65B3D4")
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	})
}

// Without a tolerance the timestamp is not checked, as in Mercado Pago's
// SDKs (toleranceSeconds is optional): a retry may carry the first
// attempt's ts, and Mercado Pago retries for days.
func TestVerifyMercadoPagoNoDefaultTolerance(t *testing.T) {
	signature.SetClock(t, time.Unix(1742505638, 0).Add(50*time.Hour))
	d := mpSDKDelivery(t, mpSDKDataID, mpSDKDataID)
	sigtest.WantReason(t, signature.NewMercadoPago([]string{mpSDKSecret}, 0).Verify(d.Req, d.Body), nil)
	sigtest.WantReason(t, signature.NewMercadoPago([]string{mpSDKSecret}, time.Hour).Verify(d.Req, d.Body), signature.ErrTimestamp)
}
