package providers

import "time"

// Standard Webhooks (and Svix, which delivers in that format under its own
// header names): `{id}.{ts}.{body}` signed `v1` (HMAC-SHA256, a `whsec_`
// secret) or `v1a` (Ed25519, a `whpk_` key); the message id is signed.
func init() {
	register(&Preset{
		Name: "standard",
		Docs: []string{
			"https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md",
		},
		DefaultKey: []string{"header:webhook-id", "body"},
		scheme:     standardWebhooks("webhook-"),
		Volatile:   []string{"webhook-signature", "webhook-timestamp"},
		Signed:     []string{"header:webhook-id"},
		// v1 re-signs with a whsec_ secret; v1a keys cannot
		Credentials: []string{"webhook-signature", "webhook-timestamp"},
		resigns:     always,
		signer:      standardSigner("webhook-"),
	})
	register(&Preset{
		Name:    "svix",
		Timeout: 15 * time.Second,
		Docs: []string{
			"https://docs.svix.com/receiving/verifying-payloads/how-manual",
			"https://docs.svix.com/retries",
			"https://docs.svix.com/receiving/source-ip-addresses",
		},
		DefaultKey: []string{"header:svix-id", "body"},
		scheme:     standardWebhooks("svix-"),
		Volatile:   []string{"svix-signature", "svix-timestamp"},
		TTL:        28 * time.Hour, // 8 attempts over 27h35m
		Signed:     []string{"header:svix-id"},
		// every region's addresses
		Addresses:   &AddressList{URL: "https://docs.svix.com/webhook-ips.json"},
		Credentials: []string{"svix-signature", "svix-timestamp"},
		resigns:     always,
		signer:      standardSigner("svix-"),
	})
}
