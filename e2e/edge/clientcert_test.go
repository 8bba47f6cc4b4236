package edge

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// mtlsSite is a site on localhost:port served over TLS with a server
// certificate of serverCA, whose client_auth verifies client certificates
// issued under any of trusted (mode verify_if_given: a request without
// one gets through the handshake, and the handler decides).
func mtlsSite(t *testing.T, port int, serverCA *testkit.CA, trusted []*testkit.CA, directive string, up *testkit.Upstream) string {
	t.Helper()
	srv := serverCA.Server(t)
	pool := ""
	for _, ca := range trusted {
		pool += " " + ca.PEMFile
	}
	return fmt.Sprintf(`https://localhost:%d {
	tls %s %s {
		client_auth {
			mode verify_if_given
			trust_pool file%s
		}
	}
	%s
	reverse_proxy %s
}
`, port, srv.CertFile, srv.KeyFile, pool, directive, up.Addr())
}

// tlsClient trusts serverCA and presents cert, if any, whatever CAs the
// server asks for (as a client that tries its luck would).
func tlsClient(serverCA *testkit.CA, cert *testkit.Issued) *http.Client {
	cfg := &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost"}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.TLS, nil }
	}
	return from("127.0.0.1", cfg)
}

// TestEdgeClientCert: through Caddy's client_auth, in a real TLS
// handshake, a certificate of the provider's CA with the expected subject
// gets through; none, one of another CA Caddy trusts, or one with another
// subject gets 403 and nothing is stored; one Caddy does not trust ends
// the handshake.
func TestEdgeClientCert(t *testing.T) {
	serverCA := testkit.NewCA(t, "Site CA")
	provider, other, unknown := testkit.NewCA(t, "Provider CA"), testkit.NewCA(t, "Other CA"), testkit.NewCA(t, "Unknown CA")
	good := provider.Client(t, pkix.Name{CommonName: "hooks.provider.test", Organization: []string{"Provider"}})
	wrongSubject := provider.Client(t, pkix.Name{CommonName: "billing.provider.test"})
	otherCA := other.Client(t, pkix.Name{CommonName: "hooks.provider.test"})
	untrusted := unknown.Client(t, pkix.Name{CommonName: "hooks.provider.test"})

	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", mtlsSite(t, port, serverCA, []*testkit.CA{provider, other}, fmt.Sprintf(`webhook_idempotency {
		source mtls
		client_cert {
			ca %s
			subject hooks.provider.test
		}
	}`, provider.PEMFile), up))
	url := fmt.Sprintf("https://localhost:%d/hook", port)

	for name, cert := range map[string]*testkit.Issued{"no certificate": nil, "another subject": &wrongSubject, "another CA Caddy trusts": &otherCA} {
		r := post(t, tlsClient(serverCA, cert), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
		reason := "client certificate not accepted"
		if cert == nil {
			reason = "client certificate required"
		}
		if r.status != http.StatusForbidden || r.body != `{"error":"`+reason+`"}` {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
	}
	if r, err := send(tlsClient(serverCA, &untrusted), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1"); err == nil {
		t.Fatalf("a certificate Caddy does not trust got through the handshake: %d %s", r.status, r.body)
	}
	up.WantCalls(t, 0)
	if st := keyState(t, c, "mtls", "evt_1"); st != "absent" {
		t.Fatalf("after the refusals the key is %s, want absent", st)
	}

	r := post(t, tlsClient(serverCA, &good), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
	if r.status != 200 || r.body != `{"call":1}` {
		t.Fatalf("the provider's certificate: %d %s", r.status, r.body)
	}
	r = post(t, tlsClient(serverCA, &good), url, `{"id":"evt_1"}`, "Idempotency-Key", "evt_1")
	if r.status != 200 || r.header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("the provider's duplicate: %d %v", r.status, r.header)
	}
	up.WantCalls(t, 1)
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_requests_total", "source", "mtls", "result", "forbidden"); v != 3 {
		t.Fatalf("forbidden counted %v times, want 3", v)
	}
}

// efiPix is a Pix received callback as Efí documents it
// (dev.efipay.com.br, API Pix, Webhooks: Recebendo callbacks).
const efiPix = `{"pix":[{"endToEndId":"E1803615022211340s08793XPJ","txid":"fc9a43k6ff384ryP5f41719","chave":"2c3c7441-b91e-4982-3c25-6105581e18ae","valor":"0.01","horario":"2020-12-21T13:40:34.000Z","infoPagador":"pagando o pix"}]}`

// TestEdgeEfiMutualTLS: the efi preset with Efí's CA (a test CA here):
// Efí's first request, without a certificate, is refused; the callback
// with the certificate is delivered once, its retry replayed.
func TestEdgeEfiMutualTLS(t *testing.T) {
	serverCA, efi := testkit.NewCA(t, "Site CA"), testkit.NewCA(t, "Efí test CA")
	cert := efi.Client(t, pkix.Name{CommonName: "webhook.efi.test"})
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", mtlsSite(t, port, serverCA, []*testkit.CA{efi}, fmt.Sprintf(`webhook_idempotency efi {
		client_cert {
			ca %s
		}
	}`, efi.PEMFile), up))
	url := fmt.Sprintf("https://localhost:%d/webhook/pix", port)

	wantForbidden(t, post(t, tlsClient(serverCA, nil), url, `{"evento":"teste_webhook"}`), "client certificate required")
	up.WantCalls(t, 0)
	if r := post(t, tlsClient(serverCA, &cert), url, efiPix); r.status != 200 || r.body != `{"call":1}` {
		t.Fatalf("the callback: %d %s", r.status, r.body)
	}
	if r := post(t, tlsClient(serverCA, &cert), url, efiPix); r.status != 200 || r.header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("its retry: %d %v", r.status, r.header)
	}
	up.WantCalls(t, 1)
	if st := keyState(t, c, "efi", testkit.SHA256Key(efiPix)); st != "completed" {
		t.Fatalf("the callback's key (its body) is %s", st)
	}
}

// TestEdgeEfiWithoutMutualTLS: Efí's fallback, for endpoints that cannot
// do mutual TLS: the hmac token in the URL and Efí's address, both.
func TestEdgeEfiWithoutMutualTLS(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", testkit.ProxySite(port, `webhook_idempotency efi {
		secret xyz-registered-with-the-url
		allow_ips 127.0.0.1
	}`, up))
	base := testkit.SiteURL(port) + "/webhook"
	one, two := from("127.0.0.1", nil), from("127.0.0.2", nil)

	if r := post(t, one, base+"?hmac=xyz-registered-with-the-url&ignorar=", efiPix); r.status != 200 {
		t.Fatalf("token and address: %d %s", r.status, r.body)
	}
	if r := post(t, one, base+"?hmac=guess&ignorar=", efiPix+" "); r.status != http.StatusUnauthorized || r.body != `{"error":"invalid signature"}` {
		t.Fatalf("a wrong token: %d %s", r.status, r.body)
	}
	wantForbidden(t, post(t, two, base+"?hmac=xyz-registered-with-the-url&ignorar=", efiPix+"  "), "address not allowed")
	up.WantCalls(t, 1)
	if got := up.Requests()[0].URI; got != "/webhook?hmac=xyz-registered-with-the-url&ignorar=" {
		t.Fatalf("the application got %s", got)
	}
}
