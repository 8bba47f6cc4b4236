package providers

// Sentry integration platform: `Sentry-Hook-Signature`, the HMAC-SHA256 hex
// of the body keyed with the integration's client secret. The
// `Sentry-Hook-Timestamp` beside it is not signed. Sentry waits 1 second for
// an answer (docs/providers.md: Sentry).
func init() {
	register(&Preset{
		Name: "sentry",
		Docs: []string{
			"https://docs.sentry.io/organization/integrations/integration-platform/webhooks/",
			"https://github.com/getsentry/sentry/blob/master/src/sentry/sentry_apps/api/serializers/app_platform_event.py",
			"https://github.com/getsentry/sentry/blob/master/src/sentry/sentry_apps/models/sentry_app.py",
			"https://github.com/getsentry/sentry/blob/master/src/sentry/utils/sentry_apps/webhooks.py",
		},
		Block: `template {
			string    "{body}"
			algorithm hmac-sha256
			signature header:Sentry-Hook-Signature
		}`,
		// no event id: Request-ID is drawn for every attempt
		DefaultKey: []string{"body"},
		Volatile:   []string{"Request-ID", "Sentry-Hook-Timestamp"},
	})
}
