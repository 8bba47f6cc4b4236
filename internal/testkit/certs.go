package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Certificates for tests that need a real TLS handshake: a CA issues
// server certificates and client certificates, written as PEM files
// Caddy's `tls` and `client_auth` read.

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEMFile is the CA certificate's PEM file.
	PEMFile string
	dir     string
}

var serial atomic.Int64

// NewCA makes a CA whose subject's common name is name, its PEM file in a
// directory of the test's own.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Test"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{Cert: cert, Key: key, dir: dir, PEMFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, ca.PEMFile, "CERTIFICATE", der)
	return ca
}

// Pool is a certificate pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issued is a certificate the CA issued, with its key and PEM files.
type Issued struct {
	TLS      tls.Certificate
	Leaf     *x509.Certificate
	CertFile string
	KeyFile  string
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(t testing.TB) Issued {
	t.Helper()
	return ca.issue(t, pkix.Name{CommonName: "localhost"}, func(c *x509.Certificate) {
		c.DNSNames = []string{"localhost"}
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	})
}

// Client issues a client certificate with subject.
func (ca *CA) Client(t testing.TB, subject pkix.Name) Issued {
	t.Helper()
	return ca.issue(t, subject, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (ca *CA) issue(t testing.TB, subject pkix.Name, set func(*x509.Certificate)) Issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := serial.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	set(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.dir, big.NewInt(n).String())
	out := Issued{
		TLS:      tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
		Leaf:     leaf,
		CertFile: base + ".pem",
		KeyFile:  base + "-key.pem",
	}
	writePEM(t, out.CertFile, "CERTIFICATE", der)
	writePEM(t, out.KeyFile, "EC PRIVATE KEY", keyDER)
	return out
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Verified is the TLS state of a connection whose client certificate leaf
// Caddy verified up to the CA's certificate (client_auth verify_if_given
// or require_and_verify).
func (ca *CA) Verified(leaf *x509.Certificate) *tls.ConnectionState {
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf, ca.Cert}}}
}
