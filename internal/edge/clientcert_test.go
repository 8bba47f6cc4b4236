package edge

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestWildcardMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"api-pix.example.com", "api-pix.example.com", true},
		{"api-pix.example.com", "api-pix.example.com.evil", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.b.example.com", true},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"CN=*,O=Efí*", "CN=webhook,O=Efí S.A.,C=BR", true},
		{"CN=*,O=Efí", "CN=webhook,O=Efí S.A.", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"*a*", "banana", true},
		{"API.example.com", "api.example.com", false}, // case counts
	} {
		if got := wildcardMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestClientCertCheck(t *testing.T) {
	ours, theirs := testkit.NewCA(t, "Provider Root"), testkit.NewCA(t, "Other Root")
	good := ours.Client(t, pkix.Name{CommonName: "webhooks.provider.example", Organization: []string{"Provider"}})
	other := ours.Client(t, pkix.Name{CommonName: "someone.else.example"})
	foreign := theirs.Client(t, pkix.Name{CommonName: "webhooks.provider.example"})

	c, err := NewCertCheck([]string{ours.PEMFile}, []string{"webhooks.*.example"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		st   *tls.ConnectionState
		want string
	}{
		"plain HTTP":                {nil, msgCertRequired},
		"TLS without a certificate": {&tls.ConnectionState{}, msgCertRequired},
		// client_auth mode request or require: presented, never verified
		"not verified by Caddy":     {&tls.ConnectionState{PeerCertificates: []*x509.Certificate{good.Leaf}}, msgCertRefused},
		"the provider's":            {ours.Verified(good.Leaf), ""},
		"another subject":           {ours.Verified(other.Leaf), msgCertRefused},
		"a chain to another CA":     {theirs.Verified(foreign.Leaf), msgCertRefused},
		"the CA in the middle only": {&tls.ConnectionState{PeerCertificates: []*x509.Certificate{good.Leaf}, VerifiedChains: [][]*x509.Certificate{{good.Leaf, ours.Cert, theirs.Cert}}}, msgCertRefused},
		"a second chain that ends well": {&tls.ConnectionState{PeerCertificates: []*x509.Certificate{good.Leaf},
			VerifiedChains: [][]*x509.Certificate{{good.Leaf, theirs.Cert}, {good.Leaf, ours.Cert}}}, ""},
	} {
		if got := c.Check(tc.st); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}

	dn, err := NewCertCheck([]string{ours.PEMFile}, []string{"CN=webhooks.provider.example,O=Provider"})
	if err != nil {
		t.Fatal(err)
	}
	if dn.Check(ours.Verified(good.Leaf)) != "" || dn.Check(ours.Verified(other.Leaf)) == "" {
		t.Error("a pattern with '=' is matched against the whole subject")
	}
	any, err := NewCertCheck([]string{ours.PEMFile, theirs.PEMFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if any.Check(ours.Verified(other.Leaf)) != "" || any.Check(theirs.Verified(foreign.Leaf)) != "" {
		t.Error("without subject patterns, any subject under one of the CAs is accepted")
	}
}

func TestClientCertCAFiles(t *testing.T) {
	ca := testkit.NewCA(t, "Root")
	dir := t.TempDir()
	chain := filepath.Join(dir, "chain.pem")
	caPEM, _ := os.ReadFile(ca.PEMFile)
	other, _ := os.ReadFile(testkit.NewCA(t, "Second").PEMFile)
	if err := os.WriteFile(chain, append(append([]byte("# Efí's chain\n"), caPEM...), other...), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewCertCheck([]string{chain}, nil)
	if err != nil || len(c.anchors) != 2 {
		t.Fatalf("a file of two certificates: %v, %d anchors", err, len(c.anchors))
	}
	for name, content := range map[string]string{
		"empty.pem":  "",
		"key.pem":    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n",
		"broken.pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"text.pem":   "not a certificate at all",
	} {
		path := filepath.Join(dir, name)
		_ = os.WriteFile(path, []byte(content), 0o600)
		if _, err := NewCertCheck([]string{path}, nil); err == nil || !strings.Contains(err.Error(), "client_cert ca "+path) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := NewCertCheck([]string{filepath.Join(dir, "missing.pem")}, nil); err == nil {
		t.Error("a missing CA file was accepted")
	}
	if _, err := NewCertCheck(nil, nil); err == nil || !strings.Contains(err.Error(), "client_cert needs 'ca'") {
		t.Errorf("no ca: %v", err)
	}
	if _, err := NewCertCheck([]string{ca.PEMFile}, []string{""}); err == nil {
		t.Error("an empty subject pattern was accepted")
	}
}
