package providers

import "net/http"

// Adyen's standard webhooks: each NotificationRequestItem of
// notificationItems carries, in additionalData.hmacSignature, the base64
// HMAC-SHA256 of
// `pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success`
// (an absent field empty), keyed with the webhook's HMAC key decoded
// from hex (Adyen Docs, "Verify HMAC signatures"; adyen-go-api-library,
// src/hmacvalidator).
func init() {
	register(&Preset{
		Name: "adyen",
		Docs: []string{
			"https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures",
			"https://docs.adyen.com/development-resources/webhooks/webhook-types",
			"https://docs.adyen.com/development-resources/webhooks/handle-webhook-events",
			"https://docs.adyen.com/development-resources/webhooks/troubleshoot",
			"https://github.com/Adyen/adyen-go-api-library/blob/fed7311e5afd37f60f3bafe22173173164f2f297/src/hmacvalidator/hmacvalidator.go",
			"https://github.com/Adyen/adyen-openapi/blob/aa014f0cbdb58ff5c44a2ff9d5fe734642210aff/json/Webhooks-v1.json",
		},
		Block: `template {
			string          "{json.pspReference}:{json.originalReference}:{json.merchantAccountCode}:{json.merchantReference}:{json.amount.value}:{json.amount.currency}:{json.eventCode}:{json.success}"
			algorithm       hmac-sha256
			items           json:notificationItems.#.NotificationRequestItem
			signature       json:additionalData.hmacSignature encoding base64
			secret_encoding hex
		}`,
		// Standard webhooks carry no event id, and Adyen's duplicates
		// share eventCode and pspReference while eventDate may differ
		// ("Handle webhook events",
		// https://docs.adyen.com/development-resources/webhooks/handle-webhook-events):
		// an item is known by its pspReference ("globally unique", the
		// NotificationRequestItem schema) with its eventCode and success
		// (an AUTHORISATION refused, then one accepted, are two outcomes).
		// A request is one item in JSON and HTTP POST ("Webhook types"),
		// each item keyed on its own when split; an item without them is
		// known by its bytes
		DefaultKey: []string{"body"},
		Batch: &Batch{Path: "json:notificationItems", Key: []string{
			"json:NotificationRequestItem.pspReference+json:NotificationRequestItem.eventCode+json:NotificationRequestItem.success", "body",
		}},
		// retried from a queue "for up to 30 days" (Troubleshoot)
		TTL: 31 * day,
		// Adyen's Webhooks API accepts events "on the basis of the HTTP
		// status code"; until February 2024 it asked for "[accepted]" in
		// the body (Adyen/adyen-openapi, json/Webhooks-v1.json, before
		// 6715bb5): this answer satisfies both
		Success: &Answer{Status: http.StatusOK, ContentType: "text/plain", Body: "[accepted]"},
	})
}
