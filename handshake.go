package webhookidempotency

import (
	"io"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// Handshakes answered at the edge (docs/providers.md: Handshakes): the
// preset's handshake (package providers knows each provider's) is answered
// on the request path before the key is resolved, so a handshake claims
// nothing, guard included; the next handler is not called, nothing is
// stored, and the result is `handshake`.

// provisionHandshake sets up the preset's handshake with the rules the
// Caddyfile parser applies; it stays nil when there is none to answer.
func (h *Handler) provisionHandshake() error {
	cfg := providers.HandshakeConfig{
		Mode:        h.Handshake,
		VerifyToken: h.VerifyToken,
		Verified:    h.verification != nil,
		Logger:      h.logger,
	}
	if h.Verify != nil && len(h.Verify.Secrets) > 0 {
		cfg.Secret = h.Verify.Secrets[0]
	}
	hs, err := providers.NewHandshake(h.Provider, cfg)
	if err != nil {
		return err
	}
	h.handshake = hs
	return nil
}

// queryHandshake answers, before the body is read, the preset's handshake
// that carries neither body nor signature (Meta's GET, CloudEvents'
// OPTIONS). It reports whether it answered.
func (rs *requestState) queryHandshake() (bool, error) {
	hs := rs.h.handshake
	if hs == nil {
		return false, nil
	}
	return rs.answerHandshake(hs.AnswerBeforeBody(rs.r))
}

// bodyHandshake answers the preset's handshake once its signature is
// verified. It reports whether it answered.
func (rs *requestState) bodyHandshake() (bool, error) {
	hs := rs.h.handshake
	if hs == nil || !hs.Signed() {
		return false, nil
	}
	return rs.answerHandshake(hs.Answer(rs.r, rs.body.buf))
}

// answerHandshake writes a handshake's answer, when ok: the next handler
// is not called and nothing is stored. A refused one (a wrong token)
// counts as a failed verification.
func (rs *requestState) answerHandshake(a providers.HandshakeAnswer, ok bool) (bool, error) {
	if !ok {
		return false, nil
	}
	if a.Refused {
		rs.setResult(results.InvalidSignature)
		rs.refused(a.Status, a.Body)
		return true, writeError(rs.w, a.Status, a.Body, "")
	}
	rs.setResult(results.Handshake)
	hdr := rs.w.Header()
	for name, values := range a.Header {
		hdr[name] = values
	}
	if a.ContentType != "" {
		hdr.Set("Content-Type", a.ContentType)
	}
	if a.Status != http.StatusNoContent {
		hdr.Set("Content-Length", strconv.Itoa(len(a.Body)))
	}
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "no-store")
	rs.w.WriteHeader(a.Status)
	if a.Body == "" {
		return true, nil
	}
	if _, err := io.WriteString(rs.w, a.Body); err != nil {
		return true, caddyhttp.Error(a.Status, err)
	}
	return true, nil
}
