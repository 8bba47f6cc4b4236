package webhookidempotency

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/edge"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func TestCaddyfileAllowIPsAndClientCert(t *testing.T) {
	wantParsed(t, `webhook_idempotency github {
	secret s
	allow_ips github 10.0.0.0/8
	allow_ips url https://ips.example.com/list.txt file /etc/caddy/ips.txt 2001:db8::1 {
		refresh 15m
	}
}`, &Handler{Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, AllowIPs: &AllowIPsConfig{
		Providers: []string{"github"},
		Ranges:    []string{"10.0.0.0/8", "2001:db8::1"},
		URLs:      []string{"https://ips.example.com/list.txt"},
		Files:     []string{"/etc/caddy/ips.txt"},
		Refresh:   dur(15 * time.Minute),
	}})
	wantParsed(t, `webhook_idempotency efi {
	client_cert {
		ca /etc/caddy/efi-chain-prod.crt {env.EXTRA_CA}
		subject "CN=*.efipay.com.br" api-pix.gerencianet.com.br
	}
}`, &Handler{Provider: "efi", ClientCert: &ClientCertConfig{
		CA:      []string{"/etc/caddy/efi-chain-prod.crt", "{env.EXTRA_CA}"},
		Subject: []string{"CN=*.efipay.com.br", "api-pix.gerencianet.com.br"},
	}})
}

func TestCaddyfileAllowIPsAndClientCertErrors(t *testing.T) {
	for _, tc := range []struct{ name, input, want string }{
		{"allow_ips empty", "webhook_idempotency source a {\n\tallow_ips\n}",
			"'allow_ips' needs a provider, an address or range, 'url <url>' or 'file <path>', at Testfile:2"},
		{"allow_ips bad range", "webhook_idempotency source a {\n\tallow_ips 10.0.0.0/33\n}",
			`allow_ips: "10.0.0.0/33" is not a CIDR range, at Testfile:2`},
		{"allow_ips unknown word", "webhook_idempotency source a {\n\tallow_ips gihtub\n}",
			"allow_ips: 'gihtub' is neither a provider that publishes its addresses (" + strings.Join(edge.ListProviders(), ", ") + ") nor an address or CIDR range, at Testfile:2"},
		{"allow_ips provider without list", "webhook_idempotency source a {\n\n\tallow_ips shopify\n}",
			"allow_ips: shopify publishes no address list that can be fetched (docs/providers.md: Published addresses): write the addresses it documents as ranges, at Testfile:3"},
		{"allow_ips url without value", "webhook_idempotency source a {\n\tallow_ips github url\n}",
			"allow_ips 'url' needs a value, at Testfile:2"},
		{"allow_ips bad url", "webhook_idempotency source a {\n\tallow_ips url ips.example.com\n}",
			"invalid allow_ips url 'ips.example.com': want an absolute http:// or https:// URL with a host, at Testfile:2"},
		{"allow_ips bad refresh", "webhook_idempotency source a {\n\tallow_ips github {\n\t\trefresh 1ms\n\t}\n}",
			"allow_ips refresh 1ms is shorter than 1s, at Testfile:3"},
		{"allow_ips unknown subdirective", "webhook_idempotency source a {\n\tallow_ips github {\n\t\tevery 1h\n\t}\n}",
			"unrecognized allow_ips subdirective 'every', at Testfile:3"},
		{"allow_ips on the directive line", "webhook_idempotency github allow_ips github",
			"unknown option 'allow_ips' on the directive line, at Testfile:1"},
		{"client_cert without ca", "webhook_idempotency source a {\n\tclient_cert {\n\t\tsubject x\n\t}\n}",
			"client_cert needs 'ca': the PEM file of the CA the client certificates are issued under, at Testfile:4"},
		{"client_cert with a value", "webhook_idempotency source a {\n\tclient_cert /ca.pem\n}",
			"client_cert takes a block, not '/ca.pem': client_cert { ca <pem file>... }, at Testfile:2"},
		{"client_cert ca empty", "webhook_idempotency source a {\n\tclient_cert {\n\t\tca\n\t}\n}",
			"client_cert 'ca' needs at least one value, at Testfile:3"},
		{"client_cert unknown", "webhook_idempotency source a {\n\tclient_cert {\n\t\tca /ca.pem\n\t\tverify_depth 2\n\t}\n}",
			"unrecognized client_cert subdirective 'verify_depth', at Testfile:4"},
		{"client_cert twice", "webhook_idempotency source a {\n\tclient_cert {\n\t\tca /ca.pem\n\t}\n\tclient_cert {\n\t\tca /ca.pem\n\t}\n}",
			"client_cert given twice, at Testfile:5"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

// TestCaddyfileEdgeAdapts: `caddy adapt` writes the options as the JSON
// that loads them back.
func TestCaddyfileEdgeAdapts(t *testing.T) {
	out, err := adaptCaddyfile(t, `:8443 {
	webhook_idempotency stripe {
		secret {env.STRIPE_WEBHOOK_SECRET}
		allow_ips stripe 192.0.2.0/24 {
			refresh 30m
		}
		client_cert {
			ca /etc/caddy/ca.pem
		}
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		`"allow_ips":{"providers":["stripe"],"ranges":["192.0.2.0/24"],"refresh":1800000000000}`,
		`"client_cert":{"ca":["/etc/caddy/ca.pem"]}`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("adapted JSON lacks %s:\n%s", want, s)
		}
	}
	var h Handler
	i := strings.Index(s, `{"allow_ips"`)
	if i < 0 {
		i = strings.Index(s, `{"handler":"webhook_idempotency"`)
	}
	dec := json.NewDecoder(strings.NewReader(s[i:]))
	if err := dec.Decode(&h); err != nil || h.AllowIPs == nil || h.ClientCert == nil || h.AllowIPs.Providers[0] != "stripe" {
		t.Fatalf("decoding the handler back: %v %+v", err, h)
	}
}
