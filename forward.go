package webhookidempotency

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The handoff to the application (docs/inbox.md: What the application
// receives): what every request the route hands on carries — the next
// handler's, an inbox attempt, a redelivery — built by internal/forward
// from the route's `forward` block and its scheme.

// ForwardConfig is what the application receives of a delivery's
// signature, and the headers added to every request to it.
type ForwardConfig struct {
	// What is done with the provider's signature: `keep` (passed on as
	// received), `resign` (recomputed as the provider signs, with the
	// secret that verified the delivery and the time of each attempt, so
	// the provider's own library accepts it however late it comes),
	// `edge` (replaced by a Standard Webhooks signature made with
	// edge_secrets, plus `Webhook-Source`) or `strip` (removed). `resign`
	// on a scheme that verifies with a public key or a token is an error
	// that suggests `edge`. Default: `resign` for inbox deliveries and
	// redeliveries when the scheme can be re-signed, else `keep`; `keep`
	// for the next handler; with a batch, `resign` where the scheme
	// allows it, else `strip` (and `keep` is refused: the envelope of the
	// new items is not what the provider signed).
	Signature string `json:"signature,omitempty"`

	// The Standard Webhooks secrets (`whsec_` and base64) `edge` signs
	// with, each adding a `v1` signature (rotation). Placeholders are
	// resolved at provision. Required with `edge`.
	EdgeSecrets []string `json:"edge_secrets,omitempty"`

	// Headers added to every request to the application, such as an
	// `Authorization` it requires. Their values are treated as secrets:
	// placeholders are resolved at provision, and they are never stored
	// (the inbox adds them at each attempt), archived, shown or logged.
	// Default: none.
	Headers map[string]string `json:"headers,omitempty"`
}

// unmarshalCaddyfile parses the forward block; the dispenser is on
// `forward`:
//
//	forward {
//		signature keep | resign | edge <secret>... | strip
//		header    <name> <value>
//	}
func (fc *ForwardConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("forward takes a block, not '%s'", d.Val())
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "signature":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("forward signature needs a value: keep, resign, edge <secret>... or strip")
			}
			mode, err := forward.ParseMode(args[0])
			if err != nil {
				return d.Errf("%v", err)
			}
			if mode == forward.Edge && len(args) == 1 {
				return d.Err("forward signature edge needs at least one secret (whsec_…)")
			}
			if mode != forward.Edge && len(args) > 1 {
				return d.Errf("forward signature %s takes no secret", args[0])
			}
			fc.Signature, fc.EdgeSecrets = args[0], args[1:]
		case "header":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return d.Errf("forward header takes a name and a value, got %d values", len(args))
			}
			if err := checkForwardHeader(args[0]); err != nil {
				return d.Errf("%v", err)
			}
			if fc.Headers == nil {
				fc.Headers = make(map[string]string)
			}
			fc.Headers[http.CanonicalHeaderKey(args[0])] = args[1]
		default:
			return d.Errf("unrecognized forward subdirective '%s'", name)
		}
	}
	return nil
}

// checkForwardHeader is the rule of a forward header's name: a valid name
// the module does not set itself on its deliveries.
func checkForwardHeader(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("invalid forward header '%s': not a valid header name", name)
	}
	switch c := http.CanonicalHeaderKey(name); {
	case c == "Idempotency-Key" || c == "Host" || c == "Content-Length" || strings.HasPrefix(c, "Webhook-"):
		return fmt.Errorf("forward header '%s' is set by the module itself", name)
	}
	return nil
}

// forwarders are a route's two handoffs: to the next handler, at once,
// and later (inbox attempts, redeliveries), when the provider's signature
// may be stale.
type forwarders struct {
	now, later *forward.Forwarder
}

// provisionForward builds the route's forwarders from its forward block
// and its scheme.
func (h *Handler) provisionForward() error {
	fc := ForwardConfig{}
	if h.Forward != nil {
		fc = *h.Forward
	}
	cfg := providers.VerifyConfig{}
	if h.Verify != nil {
		cfg = *h.Verify
	}
	cfg.Scheme = h.scheme()
	base := forward.Config{Source: h.Source}
	base.Credentials, base.CredentialQuery = providers.Credentials(cfg)
	repl := caddy.NewReplacer()
	for _, name := range slices.Sorted(maps.Keys(fc.Headers)) {
		if err := checkForwardHeader(name); err != nil {
			return err
		}
		v, err := repl.ReplaceOrErr(fc.Headers[name], true, true)
		if err != nil {
			return fmt.Errorf("forward header %s: resolving its value: %v", name, err)
		}
		base.Headers = append(base.Headers, forward.Header{Name: name, Value: v})
	}
	resign := h.verification.Resigner()
	build := func(mode forward.Mode) (*forward.Forwarder, error) {
		c := base
		c.Mode = mode
		switch mode {
		case forward.Resign:
			if resign == nil {
				return nil, fmt.Errorf("forward signature resign: %s %v", orNone(cfg.Scheme), providers.ErrNoResign)
			}
			c.Resign = resign
		case forward.Edge:
			for i, s := range fc.EdgeSecrets {
				v, err := repl.ReplaceOrErr(s, true, true)
				if err != nil {
					return nil, fmt.Errorf("forward signature edge: resolving secret %d: %v", i+1, err)
				}
				c.EdgeSecrets = append(c.EdgeSecrets, v)
			}
		}
		return forward.New(c)
	}
	var err error
	if fc.Signature != "" {
		mode, perr := forward.ParseMode(fc.Signature)
		if perr != nil {
			return perr
		}
		if h.fwd.now, err = build(mode); err != nil {
			return err
		}
		h.fwd.later = h.fwd.now
		return nil
	}
	if h.batch != nil {
		// the application gets envelopes the provider did not sign
		mode := forward.Resign
		if resign == nil {
			mode = forward.Strip
			if len(base.Credentials) > 0 || len(base.CredentialQuery) > 0 {
				h.logger.Warn("batch: the application gets the envelope of the new items with the provider's signature removed, as the scheme cannot be re-signed; set 'forward { signature edge <secret> }' for a signature it can check",
					zap.String("scheme", cfg.Scheme))
			}
		}
		h.fwd.now, err = build(mode)
		h.fwd.later = h.fwd.now
		return err
	}
	if h.fwd.now, err = build(forward.Keep); err != nil {
		return err
	}
	h.fwd.later = h.fwd.now
	if resign != nil {
		h.fwd.later, err = build(forward.Resign)
	}
	return err
}

// orNone names a scheme, or says there is none.
func orNone(scheme string) string {
	if scheme == "" || scheme == "off" {
		return "a route without verification"
	}
	return scheme
}

// forwardHeaders are the names of the route's outbound headers, which are
// redacted wherever a request is stored or shown.
func (h *Handler) forwardHeaders() []string {
	if h.Forward == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(h.Forward.Headers))
}

// handOnForward prepares the request the next handler gets, as the route
// forwards (keep, by default, changes nothing): the archive keeps the
// headers as they were received. Webhook-Replay-Suspected is the module's
// to say, in every mode: one that came from outside is not passed on.
func (rs *requestState) handOnForward() {
	f := rs.h.fwd.now
	changes := f != nil && (f.Mode() != forward.Keep || (rs.h.Forward != nil && len(rs.h.Forward.Headers) > 0))
	if !changes && rs.suspected == "" && len(rs.r.Header[inbox.SuspectedHeader]) == 0 {
		return
	}
	rs.received = rs.r.Header
	rs.r.Header = rs.r.Header.Clone()
	if changes {
		d := forward.Delivery{Key: rs.keyValue, PublicURL: publicURL(rs.r)}
		if f.Mode() == forward.Resign {
			d.Secret = rs.h.verification.SecretIndex(rs.r, rs.body.buf)
		}
		if err := f.Apply(rs.r, rs.forwarded(), d, time.Now()); err != nil {
			rs.h.logger.Warn("preparing the request for the application failed; passing it on as received",
				zap.String("key", rs.claim.Key), zap.Error(err))
			rs.r.Header = rs.received.Clone()
		}
	}
	rs.r.Header.Del(inbox.SuspectedHeader)
	if rs.suspected != "" {
		rs.r.Header.Set(inbox.SuspectedHeader, rs.suspected)
	}
}

// publicURL is the URL a request was sent to, as the provider saw it.
func publicURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + r.RequestURI
}

// receivedHeader is the request's headers as they were received.
func (rs *requestState) receivedHeader() http.Header {
	if rs.received != nil {
		return rs.received
	}
	return rs.r.Header
}

// withoutQuery is uri without the query parameters names.
func withoutQuery(uri string, names []string) string {
	path, raw, ok := strings.Cut(uri, "?")
	if !ok {
		return uri
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return path
	}
	for _, n := range names {
		q.Del(n)
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
