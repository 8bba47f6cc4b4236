package providers

import (
	"crypto/sha1"
	"testing"
)

// Vercel: x-vercel-signature, the HMAC-SHA1 hex of the body under the
// webhook's secret ("Securing webhooks": the sha1 of the payload body).
func TestVercel(t *testing.T) {
	c := bodyHMACCase{preset: "vercel", header: "X-Vercel-Signature", sign: hmacOf(sha1.New, "", false)}
	body := []byte(`{"id":"uevt_Dh1IcnIc1sWxd3QJqDxnYdjB","type":"deployment.succeeded","createdAt":1798761600000,"region":"iad1","payload":{"deployment":{"id":"dpl_2euZBFqxYdDMDG1jTrHFnNZ2eUVa","url":"my-app-ü.vercel.app"}}}`)
	checkBodyHMAC(t, c, "vercel-webhook-secret", body)
	wantPreset(t, "vercel", []string{"json:id", "body"}, 0, nil)
}
