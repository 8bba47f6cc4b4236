package providers

// Bitbucket (Cloud and Data Center): `X-Hub-Signature: sha256=<hex>`, the
// HMAC-SHA256 of the body keyed with the webhook's secret.
func init() {
	register(&Preset{
		Name: "bitbucket",
		Docs: []string{
			"https://support.atlassian.com/bitbucket-cloud/docs/event-payloads/",
			"https://bitbucket.org/blog/enhanced-webhook-security",
			"https://confluence.atlassian.com/bitbucketserver/event-payload-938025882.html",
			"https://confluence.atlassian.com/bbkb/troubleshoot-webhooks-1167729092.html",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:X-Hub-Signature prefix sha256=
		}`,
		// no documented id that a retry keeps (X-Request-UUID, Data Center's
		// X-Request-Id: "the UUID of the request"); bodies carry their
		// changes and times
		DefaultKey: []string{"body"},
	})
}
