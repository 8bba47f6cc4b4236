package webhookidempotency

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/edge"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/ipset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The protections only the edge can give (docs/caddyfile.md: Addresses and
// client certificates): the client's address and its TLS client
// certificate are checked before anything else, the body included, and a
// request that fails either is answered 403 (result `forbidden`) with
// nothing stored.

// AllowIPsConfig is the `allow_ips` option (docs/caddyfile.md: Addresses
// and client certificates): a request whose client address is in none of
// its lists is answered 403 before its body is read, and nothing is
// stored. The client address is Caddy's, so `trusted_proxies` is
// respected.
type AllowIPsConfig struct {
	// Providers whose published address lists are allowed: the presets
	// with an address list (docs/providers.md: Published addresses says
	// which, and where each list is; `github`'s is the `hooks` ranges of
	// GitHub's meta API). Each list is fetched at
	// provision, refreshed in the background and kept on disk in Caddy's
	// data directory, so a restart without network has the last one.
	Providers []string `json:"providers,omitempty"`

	// Addresses and CIDR ranges allowed as written: `192.0.2.7`,
	// `192.0.2.0/24`, `2001:db8::/32`.
	Ranges []string `json:"ranges,omitempty"`

	// URLs of address lists, fetched and kept like a provider's: one
	// address or range a line (`#` comments), a JSON array of them, or a
	// JSON object whose arrays of strings are all addresses.
	URLs []string `json:"urls,omitempty"`

	// Files of address lists in the same forms, read at provision and
	// again at every refresh. A file that does not parse at provision is
	// an error.
	Files []string `json:"files,omitempty"`

	// How often lists are fetched, and files read, again. A list that
	// fails to load (unreachable, malformed) is retried within a minute,
	// and the last good one is kept meanwhile. Default: 1h.
	Refresh caddy.Duration `json:"refresh,omitempty"`
}

// parseAllowIPs parses `allow_ips <entry>... [{ refresh <duration> }]`,
// an entry being a provider, an address or CIDR range, `url <url>` or
// `file <path>`. Several lines add up.
func (h *Handler) parseAllowIPs(d *caddyfile.Dispenser) error {
	if h.AllowIPs == nil {
		h.AllowIPs = new(AllowIPsConfig)
	}
	a := h.AllowIPs
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("'allow_ips' needs a provider, an address or range, 'url <url>' or 'file <path>'")
	}
	for i := 0; i < len(args); i++ {
		switch v := args[i]; v {
		case "url", "file":
			if i+1 >= len(args) {
				return d.Errf("allow_ips '%s' needs a value", v)
			}
			i++
			if v == "url" {
				if err := cfparse.CheckHTTPURL("allow_ips url", args[i]); err != nil {
					return d.Errf("%v", err)
				}
				a.URLs = append(a.URLs, args[i])
			} else {
				a.Files = append(a.Files, args[i])
			}
		default:
			if strings.ContainsAny(v, ":./") {
				if _, err := ipset.ParsePrefix(v); err != nil {
					return d.Errf("allow_ips: %v", err)
				}
				a.Ranges = append(a.Ranges, v)
				continue
			}
			if err := edge.CheckProvider(v); err != nil {
				return d.Errf("allow_ips: %v", err)
			}
			a.Providers = append(a.Providers, v)
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "refresh":
			v, err := cfparse.NextValue(d, "allow_ips 'refresh'")
			if err != nil {
				return err
			}
			dur, err := edge.ParseRefresh(v)
			if err != nil {
				return d.Errf("%v", err)
			}
			a.Refresh = dur
		default:
			return d.Errf("unrecognized allow_ips subdirective '%s'", d.Val())
		}
	}
	return nil
}

// ClientCertConfig is the `client_cert` option (docs/caddyfile.md:
// Addresses and client certificates): the request must have come over TLS
// with a client certificate that Caddy verified (the site's `client_auth`,
// mode `verify_if_given` or `require_and_verify`), whose verified chain
// ends in one of `ca` and whose subject matches a `subject` pattern;
// otherwise it is answered 403 before its body is read, and nothing is
// stored.
type ClientCertConfig struct {
	// PEM files of the certificates a client certificate's verified chain
	// may end in: the provider's CA (a file may hold several certificates,
	// such as an intermediate and its root). Placeholders are resolved at
	// provision. Required.
	CA []string `json:"ca,omitempty"`

	// Patterns the client certificate's subject must match, any of them.
	// A pattern with `=` is matched against the whole subject in RFC 2253
	// form (`CN=hooks.example.com,O=Example,C=BR`), one without against
	// the common name alone; `*` matches any run of characters.
	// Default: any subject.
	Subject []string `json:"subject,omitempty"`
}

// parseClientCert parses the client_cert block:
//
//	client_cert {
//		ca      <pem file>...
//		subject <pattern>...
//	}
func (h *Handler) parseClientCert(d *caddyfile.Dispenser) error {
	if h.ClientCert != nil {
		return d.Err("client_cert given twice")
	}
	if d.NextArg() {
		return d.Errf("client_cert takes a block, not '%s': client_cert { ca <pem file>... }", d.Val())
	}
	c := new(ClientCertConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		args := d.RemainingArgs()
		switch name {
		case "ca":
			if err := cfparse.SomeValues(d, "client_cert 'ca'", args); err != nil {
				return err
			}
			c.CA = append(c.CA, args...)
		case "subject":
			if err := cfparse.SomeValues(d, "client_cert 'subject'", args); err != nil {
				return err
			}
			c.Subject = append(c.Subject, args...)
		default:
			return d.Errf("unrecognized client_cert subdirective '%s'", name)
		}
	}
	if len(c.CA) == 0 {
		return d.Err(edge.ErrNoCA.Error())
	}
	h.ClientCert = c
	return nil
}

// edgeChecks is a route's allow_ips and client_cert at run time; nil when
// it has neither.
type edgeChecks struct {
	ips    *edge.Lists     // nil: every address
	cert   *edge.CertCheck // nil: no certificate needed
	warned atomic.Int64    // when the last refusal of a signed-looking request was logged (unix ns)
	quiet  atomic.Int64    // such refusals not logged since
}

// Answers of the edge checks.
const (
	msgAddressRefused     = "address not allowed"
	msgAllowListMissing   = "address allow list unavailable"
	allowListRetryAfter   = "30"
	signedRefusalLogEvery = 10 * time.Second
)

// provisionEdge builds the route's edge checks and applies its preset's
// rules for them (efi.go).
func (h *Handler) provisionEdge() error {
	if p, ok := providers.Lookup(h.Provider); ok && p.Edge != nil {
		e := providers.EdgeConfig{
			ClientCert: h.ClientCert != nil,
			VerifyOff:  h.Verify != nil && h.Verify.Scheme == "off",
			AllowIPs:   h.AllowIPs != nil,
		}
		if h.ClientCert != nil {
			e.ClientCertCAs = len(h.ClientCert.CA)
		}
		if h.Verify != nil {
			e.Secrets = len(h.Verify.Secrets)
		}
		warning, err := p.Edge(e)
		if err != nil {
			return err
		}
		if warning != "" {
			h.logger.Warn(warning)
		}
	}
	if h.AllowIPs == nil && h.ClientCert == nil {
		return nil
	}
	g := &edgeChecks{}
	if h.ClientCert != nil {
		c, err := edge.NewCertCheck(h.ClientCert.CA, h.ClientCert.Subject)
		if err != nil {
			return err
		}
		g.cert = c
	}
	if h.AllowIPs != nil {
		a, err := edge.NewLists(edge.Sources{
			Providers: h.AllowIPs.Providers,
			Ranges:    h.AllowIPs.Ranges,
			URLs:      h.AllowIPs.URLs,
			Files:     h.AllowIPs.Files,
			Refresh:   time.Duration(h.AllowIPs.Refresh),
		}, h.logger)
		if err != nil {
			return err
		}
		g.ips = a
	}
	h.edge = g
	return nil
}

// releaseEdge gives the route's address lists back to the pool.
func (h *Handler) releaseEdge() {
	if h.edge != nil && h.edge.ips != nil {
		h.edge.ips.Release()
	}
}

// edgeRefused checks the client's address and certificate; it reports
// whether the request was answered (403, or 503 while an address list has
// never loaded).
func (rs *requestState) edgeRefused() (bool, error) {
	g := rs.h.edge
	if g == nil {
		return false, nil
	}
	if g.ips != nil {
		addr := edge.AllowAddr(rs.r)
		switch g.ips.Check(addr) {
		case edge.Refused:
			rs.warnIfSigned(addr)
			return true, rs.forbidden(msgAddressRefused, addr)
		case edge.Unavailable:
			rs.setResult(results.Unavailable)
			rs.refused(http.StatusServiceUnavailable, msgAllowListMissing)
			return true, writeError(rs.w, http.StatusServiceUnavailable, msgAllowListMissing, allowListRetryAfter)
		}
	}
	if g.cert != nil {
		if reason := g.cert.Check(rs.r.TLS); reason != "" {
			return true, rs.forbidden(reason, netip.Addr{})
		}
	}
	return false, nil
}

// forbidden answers a refused request: 403, result forbidden.
func (rs *requestState) forbidden(reason string, addr netip.Addr) error {
	rs.setResult(results.Forbidden)
	rs.refused(http.StatusForbidden, reason)
	if ce := rs.h.logger.Check(zap.DebugLevel, "refused request"); ce != nil {
		ce.Write(zap.String("reason", reason), zap.Stringer("client_ip", addr))
	}
	return writeError(rs.w, http.StatusForbidden, reason, "")
}

// warnIfSigned logs a WARN when a request refused for its address carries
// the route's signature header: most likely the provider sent it from an
// address its published list does not have yet. The body is not read, so
// the signature is only looked at, not verified. At most one such line is
// written every ten seconds, with the number left out since.
func (rs *requestState) warnIfSigned(addr netip.Addr) {
	v := rs.h.verification
	if v == nil {
		return
	}
	if err := v.Verify(rs.r, nil); errors.Is(err, signature.ErrMissing) || errors.Is(err, signature.ErrUnavailable) {
		return
	}
	g := rs.h.edge
	now := time.Now().UnixNano()
	last := g.warned.Load()
	if now-last < int64(signedRefusalLogEvery) || !g.warned.CompareAndSwap(last, now) {
		g.quiet.Add(1)
		return
	}
	fields := []zap.Field{
		zap.Stringer("client_ip", addr),
		zap.Int64("not_logged_since", g.quiet.Swap(0)),
	}
	if g.ips != nil {
		fields = append(fields, zap.Any("allow_lists", g.ips.Statuses()))
	}
	rs.h.logger.Warn("refused a request from an address outside allow_ips that carries a signature: the provider may send from addresses its list does not have yet", fields...)
}

// edgeStatus is a route's allow lists, as the admin API shows them.
func (h *Handler) edgeStatus() []edge.ListStatus {
	if h.edge == nil || h.edge.ips == nil {
		return nil
	}
	return h.edge.ips.Statuses()
}
