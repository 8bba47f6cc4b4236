package providers

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// providerHosts stands in for a provider's hosts: the documents it serves
// by path, the requests it got. Every fetch the schemes make reaches it
// while the test runs.
type providerHosts struct {
	*testkit.Hosts
	mu   sync.Mutex
	docs map[string]string
	hits atomic.Int64
	gets chan string // the URLs requested, when not nil
}

func newProviderHosts(t *testing.T, names ...string) *providerHosts {
	t.Helper()
	h := &providerHosts{docs: map[string]string{}}
	h.Hosts = testkit.NewHosts(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		h.mu.Lock()
		doc, ok := h.docs[r.URL.Path]
		gets := h.gets
		h.mu.Unlock()
		if gets != nil {
			gets <- "https://" + r.Host + r.URL.RequestURI()
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(doc))
	}), names...)
	old := keyset.Client
	keyset.Client = h.Client()
	t.Cleanup(func() { keyset.Client = old })
	return h
}

// serve serves doc at path.
func (h *providerHosts) serve(path, doc string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.docs[path] = doc
}

// selfSigned is a PEM certificate of key's public half named name, valid
// from notBefore to notAfter, signed by key itself: a certificate trusted
// for where it came from has no chain to check.
func selfSigned(t *testing.T, key crypto.Signer, name string, notBefore, notAfter time.Time) string {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
