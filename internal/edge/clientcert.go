package edge

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// CertCheck is a route's client_cert at run time: the request must have
// come over TLS with a client certificate that Caddy verified (the site's
// `client_auth`, mode `verify_if_given` or `require_and_verify`), whose
// verified chain ends in one of the CAs and whose subject matches a
// pattern.
type CertCheck struct {
	anchors  map[string]bool // the DER of each CA certificate
	subjects []string
}

// ErrNoCA is the error of a client_cert without a CA.
var ErrNoCA = errors.New("client_cert needs 'ca': the PEM file of the CA the client certificates are issued under")

// Reasons a client certificate is refused, as the 403 says them.
const (
	msgCertRequired = "client certificate required"
	msgCertRefused  = "client certificate not accepted"
)

// NewCertCheck reads the CA files (PEM; placeholders resolved) and checks
// the subject patterns (docs/caddyfile.md: Addresses and client
// certificates). Errors name the file.
func NewCertCheck(caFiles, subjects []string) (*CertCheck, error) {
	if len(caFiles) == 0 {
		return nil, ErrNoCA
	}
	c := &CertCheck{anchors: map[string]bool{}}
	repl := caddy.NewReplacer()
	for _, f := range caFiles {
		path, err := repl.ReplaceOrErr(f, true, true)
		if err != nil {
			return nil, fmt.Errorf("client_cert ca: resolving %q: %v", f, err)
		}
		certs, err := readPEMCertificates(path)
		if err != nil {
			return nil, fmt.Errorf("client_cert ca %s: %v", path, err)
		}
		for _, cert := range certs {
			c.anchors[string(cert.Raw)] = true
		}
	}
	for _, p := range subjects {
		if p == "" {
			return nil, errors.New("client_cert subject: empty pattern")
		}
		c.subjects = append(c.subjects, p)
	}
	return c, nil
}

// readPEMCertificates reads every certificate of a PEM file; a file
// without one, or with a block that does not parse, is an error.
func readPEMCertificates(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 && len(certs) == 0 {
				return nil, errors.New("not a PEM file")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no CERTIFICATE block")
	}
	return certs, nil
}

// Check returns "" when the connection's verified client certificate
// chain ends in one of the CAs and its subject matches, else the reason
// of the refusal.
func (c *CertCheck) Check(st *tls.ConnectionState) string {
	if st == nil || len(st.PeerCertificates) == 0 {
		return msgCertRequired
	}
	// VerifiedChains is set only when Caddy verified the certificate
	// (client_auth mode verify_if_given or require_and_verify)
	for _, chain := range st.VerifiedChains {
		if len(chain) == 0 || !c.anchors[string(chain[len(chain)-1].Raw)] {
			continue
		}
		if c.subjectMatches(chain[0]) {
			return ""
		}
	}
	return msgCertRefused
}

// subjectMatches reports whether a certificate's subject matches one of
// the patterns (any subject without patterns).
func (c *CertCheck) subjectMatches(cert *x509.Certificate) bool {
	if len(c.subjects) == 0 {
		return true
	}
	dn := ""
	for _, p := range c.subjects {
		if strings.Contains(p, "=") {
			if dn == "" {
				dn = cert.Subject.String()
			}
			if wildcardMatch(p, dn) {
				return true
			}
		} else if wildcardMatch(p, cert.Subject.CommonName) {
			return true
		}
	}
	return false
}

// wildcardMatch reports whether s matches pattern, in which `*` matches
// any run of characters (none included) and every other character itself.
func wildcardMatch(pattern, s string) bool {
	// the classic greedy matcher with backtracking to the last star
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
