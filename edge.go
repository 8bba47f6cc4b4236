package webhookidempotency

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The protections only the edge can give (docs/caddyfile.md: Addresses and
// client certificates): the client's address and its TLS client
// certificate are checked before anything else, the body included, and a
// request that fails either is answered 403 (result `forbidden`) with
// nothing stored.

// edgeChecks is a route's allow_ips and client_cert at run time; nil when
// it has neither.
type edgeChecks struct {
	ips    *allowIPs        // nil: every address
	cert   *clientCertCheck // nil: no certificate needed
	warned atomic.Int64     // when the last refusal of a signed-looking request was logged (unix ns)
	quiet  atomic.Int64     // such refusals not logged since
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
		c, err := newClientCertCheck(h.ClientCert)
		if err != nil {
			return err
		}
		g.cert = c
	}
	if h.AllowIPs != nil {
		a, err := newAllowIPs(h.AllowIPs, h.logger)
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
		h.edge.ips.release()
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
		addr := allowAddr(rs.r)
		switch g.ips.check(addr) {
		case addrRefused:
			rs.warnIfSigned(addr)
			return true, rs.forbidden(msgAddressRefused, addr)
		case addrUnavailable:
			rs.setResult(results.Unavailable)
			rs.refused(http.StatusServiceUnavailable, msgAllowListMissing)
			return true, writeError(rs.w, http.StatusServiceUnavailable, msgAllowListMissing, allowListRetryAfter)
		}
	}
	if g.cert != nil {
		if reason := g.cert.check(rs.r.TLS); reason != "" {
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

// clientAddr is the client's address as Caddy determined it, with
// trusted_proxies respected (the client_ip variable); without it, the
// connection's peer. It allocates nothing; an address that does not parse
// is the zero Addr, in no list.
func clientAddr(r *http.Request) netip.Addr {
	s, _ := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string)
	if s == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return netip.Addr{}
		}
		s = host
	}
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return addr.Unmap()
}

// allowAddr is the client's address as allow_ips reads it: Caddy's
// (clientAddr), except behind a trusted proxy on a server that reads the
// client IP headers from the left (Caddy's default, without
// trusted_proxies_strict), where a client could put any address in front
// of those the proxies append. There it is the address Caddy's strict mode
// would take: the headers read from the right, trusted proxies skipped
// (docs/caddyfile.md: Addresses and client certificates).
func allowAddr(r *http.Request) netip.Addr {
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !trusted || srv == nil || srv.TrustedProxiesStrict > 0 {
		return clientAddr(r)
	}
	// as caddyhttp's strictUntrustedClientIp
	for _, name := range srv.ClientIPHeaders {
		parts := strings.Split(strings.Join(r.Header.Values(name), ","), ",")
		for i := len(parts) - 1; i >= 0; i-- {
			host, _, err := net.SplitHostPort(parts[i])
			if err != nil {
				host = parts[i]
			}
			host, _, _ = strings.Cut(strings.TrimSpace(host), "%")
			addr, err := netip.ParseAddr(host)
			if err != nil {
				continue
			}
			if !trustedProxy(r, srv, addr) {
				return addr.Unmap()
			}
		}
	}
	// every address a trusted proxy's: the peer itself
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	host, _, _ = strings.Cut(host, "%")
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return addr.Unmap()
}

// trustedProxy reports whether addr is one of the server's
// trusted_proxies. The server keeps them to itself and decides it for a
// request's peer: it is asked about a request from addr.
func trustedProxy(r *http.Request, srv *caddyhttp.Server, addr netip.Addr) bool {
	probe := &http.Request{Method: r.Method, URL: r.URL, Host: r.Host, Header: r.Header,
		RemoteAddr: netip.AddrPortFrom(addr, 0).String()}
	probe = caddyhttp.PrepareRequest(probe.WithContext(r.Context()), caddy.NewReplacer(), nil, srv)
	trusted, _ := caddyhttp.GetVar(probe.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	return trusted
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
		fields = append(fields, zap.Any("allow_lists", g.ips.statuses()))
	}
	rs.h.logger.Warn("refused a request from an address outside allow_ips that carries a signature: the provider may send from addresses its list does not have yet", fields...)
}

// edgeStatus is a route's allow lists, as the admin API shows them.
func (h *Handler) edgeStatus() []allowListStatus {
	if h.edge == nil || h.edge.ips == nil {
		return nil
	}
	return h.edge.ips.statuses()
}
