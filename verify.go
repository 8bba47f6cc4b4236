package webhookidempotency

import (
	"strings"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The handler's side of verification: the scheme is its `verify` block's
// or its preset's, built by package providers, which knows every provider
// and generic scheme.

// provisionVerifier builds the verification from the provider and the
// verify block, resolving their placeholders.
func (h *Handler) provisionVerifier(ctx caddy.Context) error {
	cfg := providers.VerifyConfig{}
	if h.Verify != nil {
		cfg = *h.Verify
	}
	if cfg.Scheme == "" {
		cfg.Scheme = h.Provider
	}
	v, err := providers.Provision(ctx, cfg)
	if err != nil {
		return err
	}
	h.verification = v
	return nil
}

// scheme is the name of the handler's verification scheme: its `verify`
// scheme, else its preset's ("" while neither is given).
func (h *Handler) scheme() string {
	if h.Verify != nil && h.Verify.Scheme != "" {
		return h.Verify.Scheme
	}
	return h.Provider
}

// warnVerifyConfig logs, at provision, configurations that work but will
// not do what their author most likely wants. It never rejects them.
func (h *Handler) warnVerifyConfig() {
	scheme := h.scheme()
	for _, k := range h.Key {
		name, ok := strings.CutPrefix(k, "header:")
		if !ok {
			continue
		}
		if preset, volatile := providers.VolatileHeader(name, scheme); volatile {
			p, _ := providers.Lookup(preset)
			h.logger.Warn("the key header changes on every delivery attempt (the provider signs each attempt with a new timestamp), so retries will not be deduplicated; key on the provider's stable event id instead",
				zap.String("header", name),
				zap.String("provider", preset),
				zap.Strings("use_instead", p.DefaultKey))
		}
	}
}
