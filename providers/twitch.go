package providers

import (
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Twitch EventSub: `Twitch-Eventsub-Message-Signature: sha256=<hex>` over
// `{id}{timestamp}{body}`; the callback verification is answered at the
// edge.
func init() {
	register(&Preset{
		Name: "twitch",
		Docs: []string{
			"https://dev.twitch.tv/docs/eventsub/handling-webhook-events/",
		},
		DefaultKey: []string{"header:Twitch-Eventsub-Message-Id", "body"},
		scheme:     withTolerance(signature.NewTwitch),
		Volatile:   []string{"Twitch-Eventsub-Message-Signature", "Twitch-Eventsub-Message-Timestamp"},
		Handshake:  &twitchCallbackVerification,
		// the HMAC covers the message id, the timestamp and the body
		Signed:      []string{"header:Twitch-Eventsub-Message-Id"},
		Credentials: []string{"Twitch-Eventsub-Message-Signature", "Twitch-Eventsub-Message-Timestamp"},
		resigns:     always,
		signer:      secretSigner(signature.NewTwitchSigner),
	})
}

// twitchCallbackVerification is Twitch EventSub's
// `webhook_callback_verification` message, answered with its challenge as
// plain text (Twitch, "Handling Webhook Events": responding to a challenge
// request).
var twitchCallbackVerification = Handshake{signed: true, answer: answerTwitchVerification}

func answerTwitchVerification(_ *HandshakeState, r *http.Request, body []byte) (HandshakeAnswer, bool) {
	if r.Header.Get("Twitch-Eventsub-Message-Type") != "webhook_callback_verification" {
		return HandshakeAnswer{}, false
	}
	challenge := gjson.GetBytes(body, "challenge")
	if challenge.Type != gjson.String {
		return HandshakeAnswer{}, false
	}
	return plainText(challenge.Str), true
}
