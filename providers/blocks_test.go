package providers

import (
	"strings"
	"testing"
)

// TestBlockValuesThatHoldMore: the Caddyfile of a verify template reads
// the options of values that hold more than a signature (skip, sets, the
// timestamp's separator and prefix, several secret encodings) into the
// configuration package signature takes, and refuses bad ones naming
// them.
func TestBlockValuesThatHoldMore(t *testing.T) {
	cfg, err := parseDeclaration(`template {
		string          "{timestamp}.{body}"
		algorithm       hmac-sha256
		signature       header:Sig sets " " separator , prefix v1= skip 0
		timestamp       header:Sig separator , prefix t= unit ms
		secret_encoding whsec raw
	}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Secrets = []string{"k"}
	tc, err := cfg.templateConfig()
	if err != nil {
		t.Fatal(err)
	}
	if s := tc.Signature; s.Sets != " " || s.Separator != "," || s.Prefix != "v1=" || s.Skip != 0 {
		t.Errorf("signature %+v", s)
	}
	if ts := tc.Timestamp; ts.Separator != "," || ts.Prefix != "t=" || ts.Unit != "ms" {
		t.Errorf("timestamp %+v", ts)
	}
	if tc.SecretEncoding != "whsec raw" {
		t.Errorf("secret encoding %q", tc.SecretEncoding)
	}
	if cfg.resignable() {
		t.Error("a template with two secret encodings is re-signed")
	}
	headers, _ := cfg.credentials()
	if len(headers) != 1 || headers[0] != "Sig" {
		t.Errorf("credentials %q: the shared header once", headers)
	}
	for _, c := range []struct{ block, says string }{
		{`template { signature header:Sig skip -1 }`, "skip"},
		{`template { signature header:Sig skip one }`, "skip"},
		{`template { signature header:Sig sets }`, "signature"},
		{`template { timestamp header:T unit h }`, "unit"},
		{`template { timestamp header:T suffix x }`, "suffix"},
		{`template { timestamp header:T prefix }`, "timestamp"},
		{`template { secret_encoding whsec rot13 }`, "rot13"},
	} {
		_, err := parseDeclaration(strings.NewReplacer("{ ", "{\n", " }", "\n}").Replace(c.block))
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error naming %q", c.block, err, c.says)
		}
	}
}
