package providers

// Resend delivers through Svix: its documentation verifies with the
// svix-id, svix-timestamp and svix-signature headers, and its SDK checks
// them as Standard Webhooks.
func init() {
	register(svixSender("resend", []string{
		"https://resend.com/docs/webhooks/verify-webhooks-requests",
		"https://github.com/resend/resend-node/blob/3f6745910bfd3f308371950523d5cd1797f66b4b/src/webhooks/webhooks.ts",
	}))
}
