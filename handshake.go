package webhookidempotency

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// Handshakes answered at the edge (docs/providers.md: Handshakes): some
// providers prove an endpoint is theirs before they send events, or ping
// it. A preset answers these itself: the next handler is not called,
// nothing is stored, and the result is `handshake`.

// handshake is one provider's handshake. The preset table (providers.go)
// names each provider's.
type handshake struct {
	// signed handshakes are deliveries verified like any other; the
	// others are answered before the body is read (Meta's GET).
	signed bool

	// keyed handshakes are answered with a MAC made with the first
	// secret (Zoom's).
	keyed bool

	// answer returns the answer when the request is this handshake; body
	// is the verified body, nil for unsigned handshakes.
	answer func(hs *handshakeState, r *http.Request, body []byte) (handshakeAnswer, bool)
}

// handshakeAnswer is what the handler answers a handshake with.
type handshakeAnswer struct {
	status int
	// contentType is empty for an answer without a body (a 204).
	contentType string
	body        string

	// refused answers a handshake whose token is wrong: 403 with body as
	// the error.
	refused bool
}

// handshakeState is a handler's provisioned handshake.
type handshakeState struct {
	*handshake
	verifyToken [sha256.Size]byte // Meta's, as a digest
	secret      []byte            // keyed handshakes
}

// The handshakes of the presets.
var (
	// Meta (WhatsApp Business Platform, Graph API webhooks, "Verification
	// Requests"): `GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…`,
	// answered with the challenge when the token is the one configured.
	metaSubscription = handshake{answer: answerMetaSubscription}

	// Slack's Events API `url_verification` event, answered with its
	// challenge (Slack API, "url_verification event").
	slackURLVerification = handshake{signed: true, answer: answerSlackURLVerification}

	// Zoom's `endpoint.url_validation` event, answered with the plain
	// token and its HMAC-SHA256 under the secret token (Zoom, "Using
	// webhooks": validate your webhook endpoint).
	zoomURLValidation = handshake{signed: true, keyed: true, answer: answerZoomURLValidation}

	// Discord's two PINGs, one per API on the same signature: an
	// interaction PING (`"type":1` with the interaction's `token`),
	// answered with a PONG (`{"type":1}`) (Discord, "Interactions":
	// acknowledging PING requests); and a webhook events PING (`"type":0`),
	// answered 204 with no body (Discord, "Webhook Events": acknowledging
	// PING requests). A webhook event is `"type":1` too, without a token:
	// it is passed on (see answerDiscordPing).
	discordPing = handshake{signed: true, answer: answerDiscordPing}

	// Twitch EventSub's `webhook_callback_verification` message,
	// answered with its challenge as plain text (Twitch, "Handling
	// Webhook Events": responding to a challenge request).
	twitchCallbackVerification = handshake{signed: true, answer: answerTwitchVerification}
)

func answerMetaSubscription(hs *handshakeState, r *http.Request, _ []byte) (handshakeAnswer, bool) {
	if r.Method != http.MethodGet || query.Value(r.URL.RawQuery, "hub.mode") != "subscribe" {
		return handshakeAnswer{}, false
	}
	token := sha256.Sum256([]byte(query.Value(r.URL.RawQuery, "hub.verify_token")))
	if subtle.ConstantTimeCompare(token[:], hs.verifyToken[:]) != 1 {
		return handshakeAnswer{status: http.StatusForbidden, body: msgVerifyToken, refused: true}, true
	}
	return plainText(query.Value(r.URL.RawQuery, "hub.challenge")), true
}

func answerSlackURLVerification(_ *handshakeState, _ *http.Request, body []byte) (handshakeAnswer, bool) {
	challenge, ok := eventString(body, "url_verification", "type", "url_verification", "challenge")
	if !ok {
		return handshakeAnswer{}, false
	}
	return jsonAnswer(struct {
		Challenge string `json:"challenge"`
	}{challenge})
}

func answerZoomURLValidation(hs *handshakeState, _ *http.Request, body []byte) (handshakeAnswer, bool) {
	plain, ok := eventString(body, "url_validation", "event", "endpoint.url_validation", "payload.plainToken")
	if !ok {
		return handshakeAnswer{}, false
	}
	mac := hmac.New(sha256.New, hs.secret)
	mac.Write([]byte(plain))
	return jsonAnswer(struct {
		PlainToken     string `json:"plainToken"`
		EncryptedToken string `json:"encryptedToken"`
	}{plain, hex.EncodeToString(mac.Sum(nil))})
}

// eventString returns the string at path in a JSON body whose field
// typeField is eventType. Most deliveries are not handshakes: the body is
// first searched for marker, a part of eventType that starts with a byte
// rare in JSON (`u`): bytes.Contains slows to a byte-by-byte comparison
// when the first byte keeps matching, as `e` does in Zoom's `"event"` (6.4
// µs instead of 0.18 µs for 2 KB, BenchmarkHandshakeDetection).
func eventString(body []byte, marker, typeField, eventType, path string) (string, bool) {
	if !bytes.Contains(body, []byte(marker)) || gjson.GetBytes(body, typeField).Str != eventType {
		return "", false
	}
	v := gjson.GetBytes(body, path)
	return v.Str, v.Type == gjson.String
}

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
func answerDiscordPing(_ *handshakeState, _ *http.Request, body []byte) (handshakeAnswer, bool) {
	t := gjson.GetBytes(body, "type")
	if t.Type != gjson.Number || (t.Raw != "0" && t.Raw != "1") {
		return handshakeAnswer{}, false
	}
	// a webhook event is scanned to its end for a token it does not have:
	// well under a microsecond for 2 KB (BenchmarkHandshakeDetection),
	// beside the Ed25519 verification every delivery has just passed
	interaction := gjson.GetBytes(body, "token").Type == gjson.String
	switch {
	case t.Raw == "1" && (interaction || !gjson.Get(bytesView(body), "event").Exists()):
		return handshakeAnswer{status: http.StatusOK, contentType: "application/json", body: `{"type":1}`}, true
	case t.Raw == "0" && !interaction:
		// as discord-interactions' verifyWebhookEventMiddleware answers
		return handshakeAnswer{status: http.StatusNoContent}, true
	}
	return handshakeAnswer{}, false
}

func answerTwitchVerification(_ *handshakeState, r *http.Request, body []byte) (handshakeAnswer, bool) {
	if r.Header.Get("Twitch-Eventsub-Message-Type") != "webhook_callback_verification" {
		return handshakeAnswer{}, false
	}
	challenge := gjson.GetBytes(body, "challenge")
	if challenge.Type != gjson.String {
		return handshakeAnswer{}, false
	}
	return plainText(challenge.Str), true
}

// plainText is a 200 with a text body.
func plainText(body string) handshakeAnswer {
	return handshakeAnswer{status: http.StatusOK, contentType: "text/plain", body: body}
}

// jsonAnswer is a 200 with v as its JSON body.
func jsonAnswer(v any) (handshakeAnswer, bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return handshakeAnswer{}, false
	}
	return handshakeAnswer{status: http.StatusOK, contentType: "application/json", body: string(b)}, true
}

// msgVerifyToken is the error of a Meta subscription check whose token is
// not the configured one.
const msgVerifyToken = "invalid verify token"

// provisionHandshake sets up the preset's handshake with the rules the
// Caddyfile parser applies. It is off with `handshake off`; a signed one
// is off without verification (`verify off`), and Meta's without a
// verify_token: those requests are passed on.
func (h *Handler) provisionHandshake() error {
	hs := providers[h.Provider].handshake
	if err := checkHandshakeOptions(h.Provider, h.Handshake, h.VerifyToken); err != nil {
		return err
	}
	if h.Provider == "" && (h.Handshake != "" || h.VerifyToken != "") {
		return fmt.Errorf("handshake and verify_token need a preset with a handshake (%s)", strings.Join(handshakeProviders(), ", "))
	}
	if hs == nil || h.Handshake == handshakeOff {
		return nil
	}
	state := &handshakeState{handshake: hs}
	repl := caddy.NewReplacer()
	switch {
	case !hs.signed:
		if h.VerifyToken == "" {
			return nil
		}
		token, err := repl.ReplaceOrErr(h.VerifyToken, true, true)
		if err != nil {
			return fmt.Errorf("resolving verify_token: %v", err)
		}
		state.verifyToken = sha256.Sum256([]byte(token))
	case h.verifier == nil:
		return nil
	case hs.keyed:
		if h.Verify == nil || len(h.Verify.Secrets) == 0 {
			return nil
		}
		secret, err := repl.ReplaceOrErr(h.Verify.Secrets[0], true, true)
		if err != nil {
			return fmt.Errorf("resolving secret 1: %v", err)
		}
		state.secret = []byte(secret)
	}
	h.handshake = state
	return nil
}

// handshakeOff is the `handshake` value (on | off) that turns the
// handshake off.
const handshakeOff = "off"

// checkHandshakeOptions is the rule of `handshake` and `verify_token` for
// a provider (which may not be known yet while parsing: then only the
// values are checked). The Caddyfile parser and Provision both call it.
func checkHandshakeOptions(provider, handshakeValue, verifyToken string) error {
	if handshakeValue != "" {
		if _, err := onOff.parse("handshake", handshakeValue); err != nil {
			return err
		}
	}
	if provider == "" {
		return nil
	}
	hs := providers[provider].handshake
	if handshakeValue != "" && hs == nil {
		return fmt.Errorf("the %s preset has no handshake to answer (%s have one)", provider, strings.Join(handshakeProviders(), ", "))
	}
	if verifyToken != "" && (hs == nil || hs.signed) {
		return fmt.Errorf("verify_token is the token of Meta's subscription check (the whatsapp preset); the %s preset takes none", provider)
	}
	if verifyToken != "" && handshakeValue == handshakeOff {
		return fmt.Errorf("verify_token is unused with 'handshake off'")
	}
	return nil
}

// handshakeProviders lists the presets that have a handshake.
func handshakeProviders() []string {
	var names []string
	for name, p := range providers {
		if p.handshake != nil {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// The request path's handshake steps (handler.go, ServeHTTP): before the
// body is read, and once it is verified; both come before the key is
// resolved, so a handshake claims nothing, guard included.

// queryHandshake answers, before the body is read, the preset's handshake
// that carries neither body nor signature (Meta's GET; see handshake.go).
// It reports whether it answered.
func (rs *requestState) queryHandshake() (bool, error) {
	hs := rs.h.handshake
	if hs == nil || hs.signed {
		return false, nil
	}
	return rs.answerHandshake(hs.answer(hs, rs.r, nil))
}

// bodyHandshake answers the preset's handshake once its signature is
// verified (see handshake.go). It reports whether it answered.
func (rs *requestState) bodyHandshake() (bool, error) {
	hs := rs.h.handshake
	if hs == nil || !hs.signed {
		return false, nil
	}
	return rs.answerHandshake(hs.answer(hs, rs.r, rs.body.buf))
}

// answerHandshake writes a handshake's answer, when ok: the next handler
// is not called and nothing is stored. A refused one (a wrong token)
// counts as a failed verification.
func (rs *requestState) answerHandshake(a handshakeAnswer, ok bool) (bool, error) {
	if !ok {
		return false, nil
	}
	if a.refused {
		rs.setResult(resultInvalidSignature)
		return true, writeError(rs.w, a.status, a.body, "")
	}
	rs.setResult(resultHandshake)
	hdr := rs.w.Header()
	if a.contentType != "" {
		hdr.Set("Content-Type", a.contentType)
	}
	if a.status != http.StatusNoContent {
		hdr.Set("Content-Length", strconv.Itoa(len(a.body)))
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "no-store")
	rs.w.WriteHeader(a.status)
	if a.body == "" {
		return true, nil
	}
	if _, err := io.WriteString(rs.w, a.body); err != nil {
		return true, caddyhttp.Error(a.status, err)
	}
	return true, nil
}
