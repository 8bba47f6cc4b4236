package testkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Hosts is an HTTPS server standing in for a provider's hosts (Amazon
// SNS's, PayPal's, Google's): its certificate, issued by CA, names them,
// and Client reaches it whatever host a URL names, trusting CA alone. It
// serves the documents given to Serve by path (404 for others), counts
// its requests and reports each one's URL on Requests.
type Hosts struct {
	*httptest.Server
	CA *CA
	// Hits counts the requests; Requests receives each one's URL (the
	// latest 64 not yet taken).
	Hits     atomic.Int64
	Requests chan string

	mu   sync.Mutex
	docs map[string]string
}

// NewHosts starts a server answering for names.
func NewHosts(t testing.TB, names ...string) *Hosts {
	t.Helper()
	h := &Hosts{CA: NewCA(t, "Test provider hosts CA"), Requests: make(chan string, 64), docs: map[string]string{}}
	cert := h.CA.issue(t, pkix.Name{CommonName: names[0]}, func(c *x509.Certificate) {
		c.DNSNames = names
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	h.Server.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	h.StartTLS()
	t.Cleanup(h.Close)
	return h
}

// Serve serves doc at path.
func (h *Hosts) Serve(path, doc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.docs[path] = doc
}

func (h *Hosts) serve(w http.ResponseWriter, r *http.Request) {
	h.Hits.Add(1)
	select {
	case h.Requests <- "https://" + r.Host + r.URL.RequestURI():
	default:
	}
	h.mu.Lock()
	doc, ok := h.docs[r.URL.Path]
	h.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(doc))
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
