package testkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Hosts is an HTTPS server standing in for a provider's hosts (Amazon
// SNS's, PayPal's, Google's): its certificate, issued by CA, names them,
// and Client reaches it whatever host a URL names, trusting CA alone.
type Hosts struct {
	*httptest.Server
	CA *CA
}

// NewHosts starts a server answering for names with handler.
func NewHosts(t testing.TB, handler http.Handler, names ...string) *Hosts {
	t.Helper()
	ca := NewCA(t, "Test provider hosts CA")
	cert := ca.issue(t, pkix.Name{CommonName: names[0]}, func(c *x509.Certificate) {
		c.DNSNames = names
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &Hosts{Server: srv, CA: ca}
}

// Client is a client that connects to the server for any address, checks
// its certificate against the host the URL names, and trusts CA alone.
func (h *Hosts) Client() *http.Client {
	addr := h.Listener.Addr().String()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: h.CA.Pool()},
	}
	return &http.Client{Transport: tr}
}
