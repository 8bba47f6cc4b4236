package signature_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// certServer is an HTTPS server that serves documents by path and counts
// the requests it gets.
type certServer struct {
	*httptest.Server
	hits atomic.Int64
	docs map[string][]byte
}

func newCertServer(t testing.TB, docs map[string][]byte) *certServer {
	t.Helper()
	s := &certServer{docs: docs}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		doc, ok := s.docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(doc)
	}))
	t.Cleanup(s.Close)
	return s
}

// pool is a pool of the PEM certificates.
func pool(t testing.TB, pems ...string) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	for _, pem := range pems {
		if !p.AppendCertsFromPEM([]byte(pem)) {
			t.Fatal("a certificate does not parse")
		}
	}
	return p
}

func loadJSON(t testing.TB, name string, v any) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// testCA is a certificate authority made for one test.
type testCA struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	pem  string
}

var serial atomic.Int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: templateNow.Add(-24 * time.Hour), NotAfter: templateNow.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{key: key, cert: cert, pem: pemCert(der)}
}

func pemCert(der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// issue makes a certificate for pub, named dns, valid from notBefore to
// notAfter; an intermediate when isCA.
func (ca *testCA) issue(t *testing.T, pub crypto.PublicKey, dns string, notBefore, notAfter time.Time, isCA bool) (*testCA, string) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: dns}, DNSNames: []string{dns},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	var key *ecdsa.PrivateKey
	if isCA {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
		pub = &key.PublicKey
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage, tmpl.DNSNames = true, true, x509.KeyUsageCertSign, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{key: key, cert: cert, pem: pemCert(der)}, pemCert(der)
}

// certCase is an RSA template whose key comes from X-Cert, signing the
// body in X-Sig.
type certCase struct {
	t    *testing.T
	srv  *certServer
	ca   *testCA
	leaf string // the signing key's certificate
}

func newCertCase(t *testing.T) *certCase {
	signature.SetClock(t, templateNow)
	ca := newTestCA(t, "Test Root")
	_, leaf := ca.issue(t, &sigtest.RSAKey("cert-leaf").PublicKey, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(30*24*time.Hour), false)
	return &certCase{t: t, ca: ca, leaf: leaf, srv: newCertServer(t, map[string][]byte{"/certs/signer.pem": []byte(leaf)})}
}

func (c *certCase) config(edit ...func(*signature.CertURLConfig)) signature.TemplateConfig {
	cu := signature.CertURLConfig{
		From: "header:X-Cert", Hosts: []string{`127\.0\.0\.1`}, Paths: []string{`/certs/[a-z-]+\.pem`},
		Roots: pool(c.t, c.ca.pem), HTTPClient: c.srv.Client(),
	}
	for _, e := range edit {
		e(&cu)
	}
	return signature.TemplateConfig{
		String: "{body}", Algorithm: signature.RSASHA256,
		Signature: signature.SignatureLocation{From: "header:X-Sig"},
		CertURL:   cu,
	}
}

func (c *certCase) verifier(edit ...func(*signature.CertURLConfig)) signature.Verifier {
	c.t.Helper()
	v, err := signature.NewTemplate(c.config(edit...))
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// delivery is a body signed by the leaf's key, naming certURL.
func (c *certCase) delivery(certURL string) *sigtest.Delivery {
	body := []byte(`{"id":"evt_1"}`)
	d := sigtest.NewDelivery("/hooks", body, time.Time{})
	d.Req.Header.Set("X-Sig", base64.StdEncoding.EncodeToString(sigtest.RSASign(sigtest.RSAKey("cert-leaf"), crypto.SHA256, false, body)))
	d.Req.Header.Set("X-Cert", certURL)
	return d
}

func (c *certCase) verify(v signature.Verifier, certURL string) error {
	d := c.delivery(certURL)
	return v.Verify(d.Req, d.Body)
}

// A URL off the hosts (or paths) is refused before any request: the
// server, which would serve the right certificate, is never called.
func TestCertURLOffTheHostsMakesNoRequest(t *testing.T) {
	c := newCertCase(t)
	v := c.verifier()
	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":"):]
	for _, u := range []string{
		"https://localhost" + port + "/certs/signer.pem",
		"http://127.0.0.1" + port + "/certs/signer.pem",
		"https://user@127.0.0.1" + port + "/certs/signer.pem",
		"https://127.0.0.1" + port + "/other/signer.pem",
		"https://127.0.0.1" + port + "/certs/signer.pem/../../x.pem",
		"https://127.0.0.1.example.com" + port + "/certs/signer.pem",
		"https://x127.0.0.1" + port + "/certs/signer.pem",
		"//127.0.0.1" + port + "/certs/signer.pem",
		"https:127.0.0.1" + port + "/certs/signer.pem",
		"not a url",
	} {
		sigtest.WantReason(t, c.verify(v, u), signature.ErrInvalid)
	}
	// the server's own address, on a configuration that allows another
	// host: the TLS connection would succeed, the request is not made
	elsewhere := c.verifier(func(cu *signature.CertURLConfig) { cu.Hosts = []string{`sns\.[a-z0-9-]+\.amazonaws\.com`} })
	sigtest.WantReason(t, c.verify(elsewhere, c.srv.URL+"/certs/signer.pem"), signature.ErrInvalid)
	if hits := c.srv.hits.Load(); hits != 0 {
		t.Fatalf("the server was called %d times for URLs off the hosts", hits)
	}
	sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/signer.pem"), nil)
	if hits := c.srv.hits.Load(); hits != 1 {
		t.Fatalf("%d requests for an allowed URL, want 1", hits)
	}
}

// The certificate must chain to the roots, be within its validity, have
// a name the subjects allow and a key of the algorithm's kind; the
// document must be bounded and hold a certificate. Each failure is
// ErrInvalid; a fetch that fails is ErrUnavailable.
func TestCertURLChecksTheCertificate(t *testing.T) {
	c := newCertCase(t)
	rsaPub := &sigtest.RSAKey("cert-leaf").PublicKey
	other := newTestCA(t, "Unknown Root")
	_, unknown := other.issue(t, rsaPub, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(time.Hour), false)
	_, expired := c.ca.issue(t, rsaPub, "signer.example.com", templateNow.Add(-48*time.Hour), templateNow.Add(-time.Hour), false)
	_, early := c.ca.issue(t, rsaPub, "signer.example.com", templateNow.Add(time.Hour), templateNow.Add(48*time.Hour), false)
	_, ecKey := c.ca.issue(t, &ecdsaKey("cert-ec").PublicKey, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(time.Hour), false)
	inter, interPEM := c.ca.issue(t, nil, "Test Intermediate", templateNow.Add(-time.Hour), templateNow.Add(48*time.Hour), true)
	_, viaInter := inter.issue(t, rsaPub, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(time.Hour), false)
	c.srv.docs = map[string][]byte{
		"/certs/signer.pem":    []byte(c.leaf),
		"/certs/unknown.pem":   []byte(unknown),
		"/certs/expired.pem":   []byte(expired),
		"/certs/early.pem":     []byte(early),
		"/certs/ec.pem":        []byte(ecKey),
		"/certs/oversize.pem":  []byte(c.leaf + strings.Repeat("#", signature.DefaultMaxCertSize)),
		"/certs/garbage.pem":   []byte("not a certificate"),
		"/certs/chain.pem":     []byte(viaInter + interPEM),
		"/certs/leaf-only.pem": []byte(viaInter),
	}
	v := c.verifier()
	for _, x := range []struct {
		path string
		want *signature.Error
	}{
		{"signer", nil},
		{"unknown", signature.ErrInvalid},
		{"expired", signature.ErrInvalid},
		{"early", signature.ErrInvalid},
		{"ec", signature.ErrInvalid},
		{"oversize", signature.ErrInvalid},
		{"garbage", signature.ErrInvalid},
		{"chain", nil},
		{"leaf-only", signature.ErrInvalid},
		{"missing", signature.ErrUnavailable},
	} {
		t.Run(x.path, func(t *testing.T) {
			sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/"+x.path+".pem"), x.want)
		})
	}
	t.Run("intermediates given", func(t *testing.T) {
		v := c.verifier(func(cu *signature.CertURLConfig) { cu.Intermediates = pool(t, interPEM) })
		sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/leaf-only.pem"), nil)
	})
	t.Run("subjects", func(t *testing.T) {
		v := c.verifier(func(cu *signature.CertURLConfig) { cu.Subjects = []string{`signer\.example\.com`} })
		sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/signer.pem"), nil)
		v = c.verifier(func(cu *signature.CertURLConfig) { cu.Subjects = []string{`example\.com`} })
		sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/signer.pem"), signature.ErrInvalid)
	})
	t.Run("a body larger than max_size", func(t *testing.T) {
		v := c.verifier(func(cu *signature.CertURLConfig) { cu.MaxSize = int64(len(c.leaf) - 1) })
		sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/signer.pem"), signature.ErrInvalid)
	})
	t.Run("a missing URL", func(t *testing.T) {
		d := c.delivery("")
		d.Req.Header.Del("X-Cert")
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)
	})
}

// A server that does not answer is ErrUnavailable within the timeout.
func TestCertURLSlowServerIsUnavailable(t *testing.T) {
	c := newCertCase(t)
	release := make(chan struct{})
	slow := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	v := c.verifier(func(cu *signature.CertURLConfig) {
		cu.HTTPClient, cu.Timeout = slow.Client(), 200*time.Millisecond
	})
	start := time.Now()
	sigtest.WantReason(t, c.verify(v, slow.URL+"/certs/signer.pem"), signature.ErrUnavailable)
	// generous against a loaded machine, far below an unbounded wait
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("answered after %v with a timeout of 200ms", took)
	}
}

// A failed fetch answers ErrUnavailable and is not tried again for ten
// seconds; a certificate is kept until the cache duration or its expiry,
// whichever is first, then fetched again.
func TestCertURLCaching(t *testing.T) {
	c := newCertCase(t)
	failing := atomic.Bool{}
	failing.Store(true)
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if failing.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(c.leaf))
	}))
	t.Cleanup(srv.Close)
	v := c.verifier(func(cu *signature.CertURLConfig) { cu.HTTPClient, cu.Cache = srv.Client(), time.Hour })
	u := srv.URL + "/certs/signer.pem"

	sigtest.WantReason(t, c.verify(v, u), signature.ErrUnavailable)
	sigtest.WantReason(t, c.verify(v, u), signature.ErrUnavailable)
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d fetches after a failure, want 1 (kept for CertRetry)", n)
	}
	failing.Store(false)
	signature.SetClock(t, templateNow.Add(signature.CertRetry+time.Second))
	sigtest.WantReason(t, c.verify(v, u), nil)
	sigtest.WantReason(t, c.verify(v, u), nil)
	if n := hits.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// the cache duration passed: fetched again
	signature.SetClock(t, templateNow.Add(2*time.Hour))
	sigtest.WantReason(t, c.verify(v, u), nil)
	if n := hits.Load(); n != 3 {
		t.Fatalf("%d fetches after the cache duration, want 3", n)
	}
	// a certificate that expires before the cache duration is kept until
	// it expires, then refetched and refused
	_, short := c.ca.issue(t, &sigtest.RSAKey("cert-leaf").PublicKey, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(3*time.Hour), false)
	c.leaf = short
	signature.SetClock(t, templateNow.Add(2*time.Hour+30*time.Minute))
	v = c.verifier(func(cu *signature.CertURLConfig) { cu.HTTPClient, cu.Cache = srv.Client(), 24*time.Hour })
	sigtest.WantReason(t, c.verify(v, u), nil)
	signature.SetClock(t, templateNow.Add(3*time.Hour+time.Second))
	sigtest.WantReason(t, c.verify(v, u), signature.ErrInvalid)
	if n := hits.Load(); n != 5 {
		t.Fatalf("%d fetches, want 5", n)
	}
}

// Concurrent deliveries naming a certificate not yet cached cause one
// fetch, which they all wait on.
func TestCertURLOneFetchPerURL(t *testing.T) {
	c := newCertCase(t)
	release := make(chan struct{})
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte(c.leaf))
	}))
	t.Cleanup(srv.Close)
	v := c.verifier(func(cu *signature.CertURLConfig) { cu.HTTPClient = srv.Client() })
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.verify(v, srv.URL+"/certs/signer.pem") })
	}
	// every delivery is waiting on a fetch (one each, without the
	// single flight, would make n requests)
	deadline := time.Now().Add(time.Minute)
	for signature.CertWaiters(v) < n && hits.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, %d requests", signature.CertWaiters(v), hits.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for _, err := range errs {
		sigtest.WantReason(t, err, nil)
	}
	if h := hits.Load(); h != 1 {
		t.Fatalf("%d requests for one URL, want 1", h)
	}
}

// Redirects are followed on the same host over https only.
func TestCertURLRedirects(t *testing.T) {
	c := newCertCase(t)
	var otherHits atomic.Int64
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		_, _ = w.Write([]byte(c.leaf))
	}))
	t.Cleanup(other.Close)
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/certs/moved.pem":
			http.Redirect(w, r, "/certs/here.pem", http.StatusFound)
		case "/certs/here.pem":
			_, _ = w.Write([]byte(c.leaf))
		case "/certs/away.pem":
			http.Redirect(w, r, other.URL+"/certs/here.pem", http.StatusFound)
		case "/certs/plain.pem":
			http.Redirect(w, r, strings.Replace(srv.URL, "https", "http", 1)+"/certs/here.pem", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	v := c.verifier(func(cu *signature.CertURLConfig) { cu.HTTPClient = srv.Client() })
	sigtest.WantReason(t, c.verify(v, srv.URL+"/certs/moved.pem"), nil)
	sigtest.WantReason(t, c.verify(v, srv.URL+"/certs/away.pem"), signature.ErrUnavailable)
	sigtest.WantReason(t, c.verify(v, srv.URL+"/certs/plain.pem"), signature.ErrUnavailable)
	if n := otherHits.Load(); n != 0 {
		t.Fatalf("a redirect to another host was followed (%d requests)", n)
	}
}

// With TrustOrigin, a certificate served alone by an allowed host (as
// Amazon SNS serves its own) is trusted for where it came from: no chain
// is built, but its dates, names and key are still checked, and the URL
// still has to be on the hosts.
func TestCertURLTrustOrigin(t *testing.T) {
	c := newCertCase(t)
	rsaPub := &sigtest.RSAKey("cert-leaf").PublicKey
	inter, _ := c.ca.issue(t, nil, "Test Intermediate", templateNow.Add(-time.Hour), templateNow.Add(48*time.Hour), true)
	_, leafOnly := inter.issue(t, rsaPub, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(time.Hour), false)
	_, expired := inter.issue(t, rsaPub, "signer.example.com", templateNow.Add(-48*time.Hour), templateNow.Add(-time.Hour), false)
	_, early := inter.issue(t, rsaPub, "signer.example.com", templateNow.Add(time.Hour), templateNow.Add(48*time.Hour), false)
	_, ecKey := inter.issue(t, &ecdsaKey("cert-ec").PublicKey, "signer.example.com", templateNow.Add(-time.Hour), templateNow.Add(time.Hour), false)
	c.srv.docs = map[string][]byte{
		"/certs/leaf-only.pem": []byte(leafOnly),
		"/certs/expired.pem":   []byte(expired),
		"/certs/early.pem":     []byte(early),
		"/certs/ec.pem":        []byte(ecKey),
	}
	origin := func(cu *signature.CertURLConfig) { cu.TrustOrigin, cu.Roots = true, nil }
	// the same document, checked for its chain, has none to the roots
	sigtest.WantReason(t, c.verify(c.verifier(), c.srv.URL+"/certs/leaf-only.pem"), signature.ErrInvalid)
	v := c.verifier(origin)
	for _, x := range []struct {
		path string
		want *signature.Error
	}{
		{"leaf-only", nil},
		{"expired", signature.ErrInvalid},
		{"early", signature.ErrInvalid},
		{"ec", signature.ErrInvalid},
	} {
		t.Run(x.path, func(t *testing.T) {
			sigtest.WantReason(t, c.verify(v, c.srv.URL+"/certs/"+x.path+".pem"), x.want)
		})
	}
	named := c.verifier(origin, func(cu *signature.CertURLConfig) { cu.Subjects = []string{`sns\.amazonaws\.com`} })
	sigtest.WantReason(t, c.verify(named, c.srv.URL+"/certs/leaf-only.pem"), signature.ErrInvalid)
	hits := c.srv.hits.Load()
	sigtest.WantReason(t, c.verify(v, strings.Replace(c.srv.URL, "https:", "http:", 1)+"/certs/leaf-only.pem"), signature.ErrInvalid)
	if c.srv.hits.Load() != hits {
		t.Fatal("an http URL was fetched")
	}
	if _, err := signature.NewTemplate(c.config(func(cu *signature.CertURLConfig) { cu.TrustOrigin = true })); err == nil || !strings.Contains(err.Error(), "trust origin") {
		t.Fatalf("trust origin with roots: %v", err)
	}
}
