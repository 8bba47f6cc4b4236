package providers

import "testing"

func TestResend(t *testing.T) {
	checkSvixSender(t, "resend", []byte(`{"type":"email.delivered","created_at":"2026-01-01T00:00:00.000Z","data":{"email_id":"56761188-7520-42d8-8898-ff6fc54ce618","from":"Acme <onboarding@resend.dev>","to":["delivered@resend.dev"],"subject":"Sending this example"}}`))
}
