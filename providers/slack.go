package providers

import (
	"time"

	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Slack: `X-Slack-Signature: v0=<hex>` over `v0:{ts}:{body}` with
// `X-Slack-Request-Timestamp`; the Events API's `url_verification` is
// answered at the edge.
func init() {
	register(&Preset{
		Name:    "slack",
		Timeout: 3 * time.Second,
		Docs: []string{
			"https://api.slack.com/authentication/verifying-requests-from-slack",
			"https://api.slack.com/events/url_verification",
			"https://api.slack.com/apis/events-api#retries",
		},
		DefaultKey: []string{"json:event_id", "body"},
		scheme:     withTolerance(signature.NewSlack),
		Volatile:   []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		Handshake:  &slackURLVerification,
		// the verification token of every Events API delivery
		Redact:      []string{"json:token"},
		Credentials: []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		resigns:     always,
		signer:      secretSigner(signature.NewSlackSigner),
	})
}

// slackURLVerification is Slack's Events API `url_verification` event,
// answered with its challenge (Slack API, "url_verification event").
var slackURLVerification = Handshake{signed: true, answer: answerSlackURLVerification}

func answerSlackURLVerification(_ *HandshakeState, _ *http.Request, body []byte) (HandshakeAnswer, bool) {
	challenge, ok := eventString(body, "url_verification", "type", "url_verification", "challenge")
	if !ok {
		return HandshakeAnswer{}, false
	}
	return jsonAnswer(struct {
		Challenge string `json:"challenge"`
	}{challenge})
}
