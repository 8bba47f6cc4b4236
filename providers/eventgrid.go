package providers

import (
	"errors"
	"net/http"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Azure Event Grid's webhook deliveries: nothing is signed. An endpoint
// authenticates Event Grid by a secret it put in the subscription's URL
// ("Set one of the query parameters to be a client secret … Event Grid
// service includes all the query parameters in every event delivery"), by
// a header set as a delivery property, or by Microsoft Entra's token
// (`verify jwt`); the route names where its secret is. A new subscription
// is validated with a SubscriptionValidationEvent, answered with its
// validation code once the delivery is authenticated.
func init() {
	register(&Preset{
		Name: "eventgrid",
		Docs: []string{
			"https://learn.microsoft.com/azure/event-grid/security-authentication",
			"https://learn.microsoft.com/azure/event-grid/end-point-validation-event-grid-events-schema",
			"https://learn.microsoft.com/azure/event-grid/end-point-validation-cloud-events-schema",
			"https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/http-webhook.md",
			"https://learn.microsoft.com/azure/event-grid/delivery-and-retry",
			"https://learn.microsoft.com/azure/event-grid/delivery-properties",
		},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				return headerOrQueryToken(cfg, " (or verify jwt for Microsoft Entra's token)")
			},
			options: optHeader | optPrefix | optQuery,
		},
		// the Event Grid schema posts an array (one event unless the
		// subscription batches, and then up to 5000), each event with an
		// `id` unique within its topic, by which each is deduplicated
		// (https://learn.microsoft.com/azure/event-grid/event-schema;
		// docs/providers.md: Batches)
		DefaultKey:   []string{"body"},
		Batch:        &Batch{Path: "json:#", Key: []string{"json:id", "body"}},
		BodyUnsigned: true,
		// retried for the event's time to live, 24 hours by default,
		// checked only at the next attempt, at most 12 hours apart
		TTL:       2 * day,
		Handshake: &eventGridValidation,
		// a validation event's URL carries the token that validates the
		// subscription by a GET ("Endpoint validation with Event Grid
		// events schema"); the key itself is in the route's query
		// parameter or header (providers.TokenPlaces)
		Redact: []string{"json:#.data.validationUrl"},
		signer: presetSigner{needs: needsSecret + " with --token-header or --token-query (where the route takes the key)", build: func(cfg SignConfig) (signature.Signer, error) {
			switch {
			case cfg.Secret == "":
				return nil, errors.New("eventgrid signs with --secret")
			case cfg.TokenQuery != "":
				return signature.NewQueryTokenSigner(cfg.TokenQuery, cfg.Secret), nil
			case cfg.TokenHeader != "":
				return signature.NewTokenSigner(cfg.TokenHeader, "", cfg.Secret)
			}
			return nil, errors.New("eventgrid needs where the key goes: --token-query <name> or --token-header <name>, as the route's verify eventgrid { query | header }")
		}},
	})
}

// eventGridValidation answers Event Grid's SubscriptionValidationEvent,
// an authenticated delivery holding that one event, with
// `{"validationResponse": <its validationCode>}` ("Endpoint validation
// with Event Grid events schema": 200 OK within 30 seconds; 202 is not
// taken).
var eventGridValidation = Handshake{signed: true, answer: answerEventGridValidation, preflight: answerCloudEventsPreflight}

func answerEventGridValidation(_ *HandshakeState, r *http.Request, body []byte) (HandshakeAnswer, bool) {
	if r.Header.Get("Aeg-Event-Type") != "SubscriptionValidation" {
		return HandshakeAnswer{}, false
	}
	code, ok := eventString(body, "ubscriptionValidationEvent", "0.eventType", "Microsoft.EventGrid.SubscriptionValidationEvent", "0.data.validationCode")
	if !ok || code == "" {
		return HandshakeAnswer{}, false
	}
	return jsonAnswer(struct {
		ValidationResponse string `json:"validationResponse"`
	}{code})
}

// answerCloudEventsPreflight answers the abuse protection of CloudEvents'
// webhooks, with which Event Grid validates a subscription of the
// CloudEvents schema instead of its validation event ("Endpoint validation
// with CloudEvents schema"; cloudevents/spec, http-webhook.md, 4): an
// OPTIONS with WebHook-Request-Origin, granted by a 200 with
// WebHook-Allowed-Origin, the origin as sent, WebHook-Allowed-Rate, `*`
// (no limit: the rate is the provider's to keep), and Allow: POST. It
// carries nothing to check and grants no access: the deliveries that
// follow are verified as any other.
func answerCloudEventsPreflight(r *http.Request) (HandshakeAnswer, bool) {
	if r.Method != http.MethodOptions {
		return HandshakeAnswer{}, false
	}
	origin := r.Header.Get("WebHook-Request-Origin")
	if !dnsName(origin) {
		return HandshakeAnswer{}, false
	}
	return HandshakeAnswer{Status: http.StatusOK, Header: http.Header{
		"Webhook-Allowed-Origin": {origin},
		"Webhook-Allowed-Rate":   {"*"},
		"Allow":                  {http.MethodPost},
	}}, true
}

// dnsName reports whether s is a DNS expression as WebHook-Request-Origin
// holds one (eventgrid.azure.net): letters, digits, '-' and '.', at most
// 253 bytes.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
