package providers

import (
	"errors"
	"fmt"
	"net/http"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Discord: `X-Signature-Ed25519` over `{timestamp}{body}` with
// `X-Signature-Timestamp`, the application's public key; the PINGs of
// interactions and of webhook events are answered at the edge.
func init() {
	register(&Preset{
		Name:    "discord",
		Timeout: 3 * time.Second, // interactions and webhook events alike
		Docs: []string{
			"https://discord.com/developers/docs/interactions/overview#setting-up-an-endpoint-validating-security-request-headers",
			"https://discord.com/developers/docs/events/webhook-events",
		},
		DefaultKey: []string{"json:id", "body"},
		scheme: scheme{
			build: func(cfg VerifyConfig) (signature.Verifier, error) {
				keys, err := parseEd25519Keys(cfg.PublicKeys)
				if err != nil {
					return nil, err
				}
				return signature.NewDiscord(keys, time.Duration(cfg.Tolerance))
			},
			keys: Ed25519Keys,
		},
		Volatile:  []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
		Handshake: &discordPing,
		// an interaction's token, which answers it for 15 minutes
		Redact:      []string{"json:token"},
		Credentials: []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
		signer: presetSigner{needs: needsPrivateKey, build: func(cfg SignConfig) (signature.Signer, error) {
			if cfg.PrivateKey == "" {
				return nil, errors.New("discord signs with the application's Ed25519 key, which only Discord holds: give --private-key, a key whose public half is the route's public_key")
			}
			key, err := signature.ParseEd25519PrivateKey(cfg.PrivateKey)
			if err != nil {
				return nil, fmt.Errorf("--private-key: %v", err)
			}
			return signature.NewDiscordSigner(key), nil
		}},
	})
}

// discordPing is Discord's two PINGs, one per API on the same signature:
// an interaction PING (`"type":1` with the interaction's `token`),
// answered with a PONG (`{"type":1}`) (Discord, "Interactions":
// acknowledging PING requests); and a webhook events PING (`"type":0`),
// answered 204 with no body (Discord, "Webhook Events": acknowledging
// PING requests). A webhook event is `"type":1` too, without a token: it
// is passed on (see answerDiscordPing).
var discordPing = Handshake{signed: true, answer: answerDiscordPing}

// answerDiscordPing answers Discord's PINGs. Discord sends two APIs to
// endpoints verified with the same key, told apart by the body's shape
// (docs/providers.md: Discord): an interaction always carries its
// continuation `token` and has `type` 1 (PING) to 5; a webhook event,
// `{"version":1,"application_id":…,"type":0|1,"event":{…}}`, never carries
// a token, and its `type` 1 carries the `event` the application must
// process. So `"type":1` is a PING unless it carries an event without a
// token (a bare `{"type":1}` is the interactions PING, as
// discord-interactions' verifyKeyMiddleware answers it), and `"type":0`
// only without a token: anything else is a delivery. Taking an event for
// a PING would drop it; taking a PING for a delivery only passes it on.
func answerDiscordPing(_ *HandshakeState, _ *http.Request, body []byte) (HandshakeAnswer, bool) {
	t := gjson.GetBytes(body, "type")
	if t.Type != gjson.Number || (t.Raw != "0" && t.Raw != "1") {
		return HandshakeAnswer{}, false
	}
	// a webhook event is scanned to its end for a token it does not have:
	// well under a microsecond for 2 KB (BenchmarkHandshakeDetection),
	// beside the Ed25519 verification every delivery has just passed
	interaction := gjson.GetBytes(body, "token").Type == gjson.String
	switch {
	case t.Raw == "1" && (interaction || !gjson.Get(bytesView(body), "event").Exists()):
		return HandshakeAnswer{Status: http.StatusOK, ContentType: "application/json", Body: `{"type":1}`}, true
	case t.Raw == "0" && !interaction:
		// as discord-interactions' verifyWebhookEventMiddleware answers
		return HandshakeAnswer{Status: http.StatusNoContent}, true
	}
	return HandshakeAnswer{}, false
}

// bytesView is b as a string without a copy; b must not change while the
// string is used.
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
