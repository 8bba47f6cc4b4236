package edge

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ClientAddr is the client's address as Caddy determined it, with
// trusted_proxies respected (the client_ip variable); without it, the
// connection's peer. It allocates nothing; an address that does not parse
// is the zero Addr, in no list.
func ClientAddr(r *http.Request) netip.Addr {
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

// AllowAddr is the client's address as allow_ips reads it: Caddy's
// (ClientAddr), except behind a trusted proxy on a server that reads the
// client IP headers from the left (Caddy's default, without
// trusted_proxies_strict), where a client could put any address in front
// of those the proxies append. There it is the address Caddy's strict mode
// would take: the headers read from the right, trusted proxies skipped
// (docs/caddyfile.md: Addresses and client certificates).
func AllowAddr(r *http.Request) netip.Addr {
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	srv, _ := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !trusted || srv == nil || srv.TrustedProxiesStrict > 0 {
		return ClientAddr(r)
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
