package providers

import "time"

// Standard Webhooks (and Svix, which delivers in that format under its own
// header names): `{id}.{ts}.{body}` signed `v1` (HMAC-SHA256, a `whsec_`
// secret) or `v1a` (Ed25519, a `whpk_` key); the message id is signed.
func init() {
	register(standardSender("standard", nil))
	svix := svixSender("svix", []string{"https://docs.svix.com/receiving/source-ip-addresses"})
	// every region's addresses (a sender through Svix takes `allow_ips svix`)
	svix.Addresses = &AddressList{URL: "https://docs.svix.com/webhook-ips.json"}
	register(svix)
}

// standardSender is the preset of a sender in the Standard Webhooks format
// (the standard preset, and providers that send it under their own name):
// its webhook- headers, the message id as the key.
func standardSender(name string, docs []string) *Preset {
	return &Preset{
		Name:       name,
		Docs:       append(docs, "https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md"),
		DefaultKey: []string{"header:webhook-id", "body"},
		scheme:     standardWebhooks("webhook-"),
		Volatile:   []string{"webhook-signature", "webhook-timestamp"},
		Signed:     []string{"header:webhook-id"},
		// v1 re-signs with a whsec_ secret; v1a keys cannot
		Credentials: []string{"webhook-signature", "webhook-timestamp"},
		resigns:     always,
		signer:      standardSigner("webhook-"),
	}
}

// svixSender is the preset of a sender that delivers through Svix (the
// svix preset, and providers that send through it under their own name):
// Standard Webhooks on svix- headers, the message id as the key, Svix's
// retry window and its timeout.
func svixSender(name string, docs []string) *Preset {
	return &Preset{
		Name: name,
		Docs: append(docs,
			"https://docs.svix.com/receiving/verifying-payloads/how-manual",
			"https://docs.svix.com/retries",
		),
		DefaultKey:  []string{"header:svix-id", "body"},
		scheme:      standardWebhooks("svix-"),
		Volatile:    []string{"svix-signature", "svix-timestamp"},
		TTL:         28 * time.Hour,   // 8 attempts over 27h35m
		Timeout:     15 * time.Second, // an attempt that takes longer fails
		Signed:      []string{"header:svix-id"},
		Credentials: []string{"svix-signature", "svix-timestamp"},
		resigns:     always,
		signer:      standardSigner("svix-"),
	}
}
