package providers

import (
	"strings"
	"testing"
)

// A Pix webhook carries no signature: the preset verifies nothing itself,
// refuses a secret, and requires the PSP's client certificate with its CA
// (the request path is checked end to end in e2e/edge, through Caddy's
// client_auth).
func TestPix(t *testing.T) {
	p := presets["pix"]
	for _, c := range []struct {
		name string
		e    EdgeConfig
		want string
	}{
		{"nothing", EdgeConfig{}, "needs client_cert { ca"},
		{"verify off alone", EdgeConfig{VerifyOff: true}, "needs client_cert { ca"},
		{"allow_ips alone", EdgeConfig{AllowIPs: true}, "needs client_cert { ca"},
		{"a certificate without its CA", EdgeConfig{ClientCert: true}, "needs client_cert's ca"},
		{"the PSP's certificate", EdgeConfig{ClientCert: true, ClientCertCAs: 1}, ""},
	} {
		_, err := p.Edge(c.e)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if v, err := buildVerifier(VerifyConfig{Scheme: "pix"}); v != nil || err != nil {
		t.Fatalf("pix without a secret: %v %v, want nothing to verify", v, err)
	}
	if _, err := buildVerifier(VerifyConfig{Scheme: "pix", Secrets: []string{"s"}}); err == nil {
		t.Fatal("pix took a secret")
	}
	// a Pix is known by its endToEndId and the state of its refunds
	if b := p.Batch; b.Path != "json:pix" || strings.Join(b.Key, " ") != "json:endToEndId+json:devolucoes body" {
		t.Fatalf("pix batch %+v", b)
	}
	if _, err := NewSigner("pix", SignConfig{Secret: "s"}); err == nil || !strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("pix signer: %v", err)
	}
}
