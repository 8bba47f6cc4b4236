package providers

import (
	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// Microsoft Graph change notifications: nothing is signed. Each
// notification of `value` carries the subscription's clientState, the
// secret given when subscribing, which receivers compare ("Receive change
// notifications through webhooks": validate the clientState); the route's
// secrets are the clientStates it takes (several while rotating), each
// item compared in constant time. A subscription's endpoint is first
// validated: `POST ?validationToken=<t>`, answered `200 text/plain <t>`.
func init() {
	register(&Preset{
		Name: "graph",
		Docs: []string{
			"https://learn.microsoft.com/graph/change-notifications-delivery-webhooks",
			"https://learn.microsoft.com/graph/api/resources/changenotification",
			"https://learn.microsoft.com/graph/api/resources/changenotificationcollection",
			"https://github.com/microsoftgraph/microsoft-graph-docs-contrib/blob/main/concepts/change-notifications-delivery-webhooks.md",
		},
		Block: `template {
			algorithm token
			items     json:value.#
			signature json:clientState
		}`,
		// one POST may hold notifications of several subscriptions, each
		// deduplicated by its `id`, which is optional and not said to be
		// kept by a retry (changeNotification): one without is known by
		// its bytes
		DefaultKey:   []string{"body"},
		Batch:        &Batch{Path: "json:value", Key: []string{"json:id", "body"}},
		BodyUnsigned: true,
		Handshake:    &graphValidation,
		// the clientState is the secret itself, in every notification;
		// rich notifications carry tokens Microsoft signed for the app
		Redact: []string{"json:value.#.clientState", "json:validationTokens"},
	})
}

// graphValidation is Graph's notification endpoint validation: a POST with
// a validationToken in the query, answered with the token, URL-decoded,
// as text within 10 seconds. It carries nothing to check.
var graphValidation = Handshake{open: true, answer: answerGraphValidation}

func answerGraphValidation(_ *HandshakeState, r *http.Request, _ []byte) (HandshakeAnswer, bool) {
	if r.Method != http.MethodPost {
		return HandshakeAnswer{}, false
	}
	token := query.Value(r.URL.RawQuery, "validationToken")
	if token == "" {
		return HandshakeAnswer{}, false
	}
	return plainText(token), true
}
