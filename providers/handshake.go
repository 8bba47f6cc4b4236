package providers

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/tidwall/gjson"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// Handshakes answered at the edge (docs/providers.md: Handshakes): some
// providers prove an endpoint is theirs before they send events, or ping
// it. A preset answers these itself: the next handler is not called,
// nothing is stored, and the result is `handshake`. Each provider's answer
// is in its own file.

// Handshake is one provider's handshake.
type Handshake struct {
	// signed handshakes are deliveries verified like any other; the
	// others are answered before the body is read (Meta's GET).
	signed bool

	// keyed handshakes are answered with a MAC made with the first
	// secret (Zoom's).
	keyed bool

	// open handshakes are unsigned checks that need no token: their
	// answer gives back nothing but what the request sent, so anyone may
	// get it (Dropbox's and Nylas's GET challenge, WooCommerce's
	// activation ping, Intercom's HEAD, Microsoft Graph's
	// validationToken). They are answered before the body is read,
	// whether or not the route verifies signatures; the other unsigned
	// ones check the route's verify_token (Meta's).
	open bool

	// answer returns the answer when the request is this handshake; body
	// is the verified body, nil for unsigned handshakes.
	answer func(hs *HandshakeState, r *http.Request, body []byte) (HandshakeAnswer, bool)

	// preflight, beside a signed handshake, is an open one the same
	// provider sends instead, answered before the body is read
	// (CloudEvents' OPTIONS abuse protection beside Event Grid's
	// validation event).
	preflight func(r *http.Request) (HandshakeAnswer, bool)
}

// HandshakeAnswer is what the handler answers a handshake with.
type HandshakeAnswer struct {
	Status int
	// ContentType is empty for an answer without a body (a 204).
	ContentType string
	Body        string

	// Refused answers a handshake whose token is wrong: Status with Body
	// as the error.
	Refused bool

	// Header holds headers the answer carries beside its content type
	// (CloudEvents' WebHook-Allowed-Origin); nil for none.
	Header http.Header
}

// HandshakeState is a route's provisioned handshake.
type HandshakeState struct {
	*Handshake
	verifyToken [sha256.Size]byte // Meta's, as a digest
	secret      []byte            // keyed handshakes
	logger      *zap.Logger       // the route's
}

// Signed reports whether the handshake comes as a verified delivery (it
// is answered once the body is verified), rather than before the body is
// read.
func (hs *HandshakeState) Signed() bool { return hs.signed }

// Answer returns the answer when the request is the handshake; body is the
// verified body, nil for a handshake that is not signed.
func (hs *HandshakeState) Answer(r *http.Request, body []byte) (HandshakeAnswer, bool) {
	return hs.answer(hs, r, body)
}

// AnswerBeforeBody returns the answer when the request is a handshake
// answered before its body is read: the preset's unsigned handshake, or
// the open one that comes beside a signed handshake.
func (hs *HandshakeState) AnswerBeforeBody(r *http.Request) (HandshakeAnswer, bool) {
	switch {
	case !hs.signed:
		return hs.answer(hs, r, nil)
	case hs.preflight != nil:
		return hs.preflight(r)
	}
	return HandshakeAnswer{}, false
}

// HandshakeOff is the `handshake` value (on | off) that turns the
// handshake off.
const HandshakeOff = "off"

// HandshakeConfig is what a route configures of its preset's handshake.
type HandshakeConfig struct {
	// Mode is `on`, `off` or "" (on).
	Mode string
	// VerifyToken is Meta's verify token, unresolved.
	VerifyToken string
	// Verified tells whether the route verifies signatures (a signed
	// handshake is off without verification).
	Verified bool
	// Secret is the route's first secret, unresolved (keyed handshakes).
	Secret string
	// Logger is the route's logger, for what a handshake does after its
	// answer (SNS's confirmation). Default: Caddy's, named as the
	// handler's.
	Logger *zap.Logger
}

// NewHandshake sets up a preset's handshake with the rules the Caddyfile
// parser applies; it returns nil when there is none to answer: the preset
// has none, `handshake off`, a signed one without verification, or Meta's
// without a verify_token (those requests are passed on).
func NewHandshake(preset string, cfg HandshakeConfig) (*HandshakeState, error) {
	if err := CheckHandshakeOptions(preset, cfg.Mode, cfg.VerifyToken); err != nil {
		return nil, err
	}
	if preset == "" && (cfg.Mode != "" || cfg.VerifyToken != "") {
		return nil, fmt.Errorf("handshake and verify_token need a preset with a handshake (%s)", strings.Join(HandshakeProviders(), ", "))
	}
	p, ok := presets[preset]
	if !ok || p.Handshake == nil || cfg.Mode == HandshakeOff {
		return nil, nil
	}
	hs := p.Handshake
	state := &HandshakeState{Handshake: hs, logger: cfg.Logger}
	if state.logger == nil {
		state.logger = caddy.Log().Named("http.handlers.webhook_idempotency")
	}
	repl := caddy.NewReplacer()
	switch {
	case hs.open:
	case !hs.signed:
		if cfg.VerifyToken == "" {
			return nil, nil
		}
		token, err := repl.ReplaceOrErr(cfg.VerifyToken, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving verify_token: %v", err)
		}
		state.verifyToken = sha256.Sum256([]byte(token))
	case !cfg.Verified:
		return nil, nil
	case hs.keyed:
		if cfg.Secret == "" {
			return nil, nil
		}
		secret, err := repl.ReplaceOrErr(cfg.Secret, true, true)
		if err != nil {
			return nil, fmt.Errorf("resolving secret 1: %v", err)
		}
		state.secret = []byte(secret)
	}
	return state, nil
}

// CheckHandshakeOptions is the rule of `handshake` and `verify_token` for
// a preset (which may not be known yet while parsing: then only the
// values are checked). The Caddyfile parser and Provision both call it.
func CheckHandshakeOptions(preset, mode, verifyToken string) error {
	if mode != "" {
		if _, err := cfparse.OnOff.Parse("handshake", mode); err != nil {
			return err
		}
	}
	if preset == "" {
		return nil
	}
	var hs *Handshake
	if p, ok := presets[preset]; ok {
		hs = p.Handshake
	}
	if mode != "" && hs == nil {
		return fmt.Errorf("the %s preset has no handshake to answer (%s have one)", preset, strings.Join(HandshakeProviders(), ", "))
	}
	if verifyToken != "" && (hs == nil || hs.signed || hs.open) {
		return fmt.Errorf("verify_token is the token of Meta's subscription check (the whatsapp preset); the %s preset takes none", preset)
	}
	if verifyToken != "" && mode == HandshakeOff {
		return fmt.Errorf("verify_token is unused with 'handshake off'")
	}
	return nil
}

// HandshakeProviders lists the presets that have a handshake, sorted.
func HandshakeProviders() []string {
	var names []string
	for _, p := range All() {
		if p.Handshake != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// challengeEcho is the GET `?challenge=<c>` a provider sends to check an
// endpoint before it delivers to it (Dropbox, Nylas), answered with the
// challenge as it is, in a `text/plain` body (the handler adds
// `X-Content-Type-Options: nosniff`, which Dropbox asks for so that the
// echo is no reflected script). Unsigned: a GET without the parameter is
// no handshake.
var challengeEcho = Handshake{open: true, answer: answerChallengeEcho}

func answerChallengeEcho(_ *HandshakeState, r *http.Request, _ []byte) (HandshakeAnswer, bool) {
	if r.Method != http.MethodGet {
		return HandshakeAnswer{}, false
	}
	c := query.Value(r.URL.RawQuery, "challenge")
	if c == "" {
		return HandshakeAnswer{}, false
	}
	return plainText(c), true
}

// plainText is a 200 with a text body.
func plainText(body string) HandshakeAnswer {
	return HandshakeAnswer{Status: http.StatusOK, ContentType: "text/plain", Body: body}
}

// jsonAnswer is a 200 with v as its JSON body.
func jsonAnswer(v any) (HandshakeAnswer, bool) {
	b, err := json.Marshal(v)
	if err != nil {
		return HandshakeAnswer{}, false
	}
	return HandshakeAnswer{Status: http.StatusOK, ContentType: "application/json", Body: string(b)}, true
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
