package webhookidempotency

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
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
)

// ClientCertConfig is the `client_cert` option (docs/caddyfile.md:
// Addresses and client certificates): the request must have come over TLS
// with a client certificate that Caddy verified (the site's `client_auth`,
// mode `verify_if_given` or `require_and_verify`), whose verified chain
// ends in one of `ca` and whose subject matches a `subject` pattern;
// otherwise it is answered 403 before its body is read, and nothing is
// stored.
type ClientCertConfig struct {
	// PEM files of the certificates a client certificate's verified chain
	// may end in: the provider's CA (a file may hold several certificates,
	// such as an intermediate and its root). Placeholders are resolved at
	// provision. Required.
	CA []string `json:"ca,omitempty"`

	// Patterns the client certificate's subject must match, any of them.
	// A pattern with `=` is matched against the whole subject in RFC 2253
	// form (`CN=hooks.example.com,O=Example,C=BR`), one without against
	// the common name alone; `*` matches any run of characters.
	// Default: any subject.
	Subject []string `json:"subject,omitempty"`
}

// parseClientCert parses the client_cert block:
//
//	client_cert {
//		ca      <pem file>...
//		subject <pattern>...
//	}
func (h *Handler) parseClientCert(d *caddyfile.Dispenser) error {
	if h.ClientCert != nil {
		return d.Err("client_cert given twice")
	}
	if d.NextArg() {
		return d.Errf("client_cert takes a block, not '%s': client_cert { ca <pem file>... }", d.Val())
	}
	c := new(ClientCertConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		args := d.RemainingArgs()
		switch name {
		case "ca":
			if err := cfparse.SomeValues(d, "client_cert 'ca'", args); err != nil {
				return err
			}
			c.CA = append(c.CA, args...)
		case "subject":
			if err := cfparse.SomeValues(d, "client_cert 'subject'", args); err != nil {
				return err
			}
			c.Subject = append(c.Subject, args...)
		default:
			return d.Errf("unrecognized client_cert subdirective '%s'", name)
		}
	}
	if len(c.CA) == 0 {
		return d.Err("client_cert needs 'ca': the PEM file of the CA the client certificates are issued under")
	}
	h.ClientCert = c
	return nil
}

// clientCertCheck is a route's client_cert at run time.
type clientCertCheck struct {
	anchors  map[string]bool // the DER of each CA certificate
	subjects []string
}

// Reasons a client certificate is refused, as the 403 says them.
const (
	msgCertRequired = "client certificate required"
	msgCertRefused  = "client certificate not accepted"
)

// newClientCertCheck reads the CA files and checks the patterns. Errors
// name the file.
func newClientCertCheck(cfg *ClientCertConfig) (*clientCertCheck, error) {
	if len(cfg.CA) == 0 {
		return nil, errors.New("client_cert needs 'ca': the PEM file of the CA the client certificates are issued under")
	}
	c := &clientCertCheck{anchors: map[string]bool{}}
	repl := caddy.NewReplacer()
	for _, f := range cfg.CA {
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
	for _, p := range cfg.Subject {
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

// check returns "" when the connection's verified client certificate
// chain ends in one of the CAs and its subject matches, else the reason
// of the refusal.
func (c *clientCertCheck) check(st *tls.ConnectionState) string {
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
func (c *clientCertCheck) subjectMatches(cert *x509.Certificate) bool {
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
