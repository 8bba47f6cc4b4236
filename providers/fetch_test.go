package providers

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// providerHosts stands in for a provider's hosts: every fetch the schemes
// make reaches it while the test runs.
func providerHosts(t testing.TB, names ...string) *testkit.Hosts {
	t.Helper()
	h := testkit.NewHosts(t, names...)
	old := keyset.Client
	keyset.Client = h.Client()
	t.Cleanup(func() { keyset.Client = old })
	return h
}

// selfSigned is a PEM certificate of key's public half named name, valid
// from notBefore to notAfter, signed by key itself: a certificate trusted
// for where it came from has no chain to check.
func selfSigned(t testing.TB, key crypto.Signer, name string, notBefore, notAfter time.Time) string {
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
