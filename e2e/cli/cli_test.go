// Package cli tests the module's Caddy subcommands end to end: `caddy
// webhook-idempotency send` signs deliveries for every preset and sends
// them to a real Caddy configured as the docs say, and `key`, `forget` and
// `tail` read and change its state through the real admin API. Each
// command runs as Caddy's command line in a process of its own (this test
// binary run as `caddy`, testkit.CaddyCommand).
package cli

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/keyset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// caddyCLI runs `caddy <args>` and returns its output (stdout and stderr)
// and exit code.
func caddyCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := testkit.CaddyCommand(args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("caddy %s: %v\n%s", strings.Join(args, " "), err, out)
	return "", -1
}

// mustCLI runs `caddy <args>`, which must succeed.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, code := caddyCLI(t, args...)
	if code != 0 {
		t.Fatalf("caddy %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// unsignable is what `send list` says of a preset without a signer.
const unsignable = "cannot be signed by this command"

// presets lists the presets `send list` prints (the module's preset
// table) that can be signed, and those that cannot.
func presets(t *testing.T) (signable, not []string) {
	t.Helper()
	out := mustCLI(t, "webhook-idempotency", "send", "list")
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(line, "  ") {
			if strings.HasSuffix(line, unsignable) {
				not = append(not, f[0])
			} else {
				signable = append(signable, f[0])
			}
		}
	}
	if len(signable)+len(not) < 20 {
		t.Fatalf("send list printed %d presets:\n%s", len(signable)+len(not), out)
	}
	return signable, not
}

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// presetRoute is a route of one preset, configured as docs/providers.md
// says, and the send flags that sign for it.
type presetRoute struct {
	config string
	flags  []string
}

// routeFor configures preset on /p/<preset> with key material made for the
// test, and returns the flags `send` signs with; hosts stands in for the
// hosts SNS and PayPal serve their certificates from.
func routeFor(t *testing.T, dir, preset string, hosts *testkit.Hosts) presetRoute {
	t.Helper()
	secret := "cli-secret-" + preset
	if strings.HasPrefix(providers.SignerNeeds(preset), "--secret (whsec_…)") {
		// a Standard Webhooks signer (standard, svix, openai, …)
		secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a standard webhooks secret for "+preset))
	}
	switch preset {
	case "discord":
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		der, _ := x509.MarshalPKCS8PrivateKey(priv)
		key := writeFile(t, dir, "discord.pem", pemBlock("PRIVATE KEY", der))
		return presetRoute{fmt.Sprintf("webhook_idempotency discord {\n\tpublic_key %s\n}", hex.EncodeToString(pub)), []string{"--private-key", key}}
	case "telnyx":
		// Telnyx's Ed25519 key: the route verifies with its public half in
		// base64, as Telnyx's portal shows it
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		der, _ := x509.MarshalPKCS8PrivateKey(priv)
		key := writeFile(t, dir, "telnyx.pem", pemBlock("PRIVATE KEY", der))
		return presetRoute{fmt.Sprintf("webhook_idempotency telnyx {\n\tpublic_key %s\n}", base64.StdEncoding.EncodeToString(pub)), []string{"--private-key", key}}
	case "woovi", "wise":
		// the provider's RSA key: the route verifies with its public half
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		pubDER, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
		pub := writeFile(t, dir, preset+".pub.pem", pemBlock("PUBLIC KEY", pubDER))
		key := writeFile(t, dir, preset+".pem", pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k)))
		return presetRoute{fmt.Sprintf("webhook_idempotency %s {\n\tpublic_key {file.%s}\n}", preset, pub), []string{"--private-key", key}}
	case "stone":
		signing, _ := rsa.GenerateKey(rand.Reader, 2048)
		partner, _ := rsa.GenerateKey(rand.Reader, 2048)
		set, err := signature.StoneKeySet(signing, "cli-kid")
		if err != nil {
			t.Fatal(err)
		}
		jwks := writeFile(t, dir, "stone-keys.json", set)
		partnerKey := writeFile(t, dir, "partner.pem", pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(partner)))
		partnerPub, _ := x509.MarshalPKIXPublicKey(&partner.PublicKey)
		return presetRoute{
			fmt.Sprintf("webhook_idempotency stone {\n\tprivate_key {file.%s}\n\tjwks_file %s\n}", partnerKey, jwks),
			[]string{
				"--private-key", writeFile(t, dir, "stone-signing.pem", pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(signing))),
				"--encrypt-to", writeFile(t, dir, "partner.pub.pem", pemBlock("PUBLIC KEY", partnerPub)),
				"--kid", "cli-kid",
			},
		}
	case "sns", "paypal":
		// their certificates come from their hosts (a stand-in here), each
		// named as the preset requires
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		key := writeFile(t, dir, preset+".pem", pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k)))
		if preset == "paypal" {
			hosts.Serve("/v1/notifications/certs/CERT-cli", sigtest.SelfSignedCert(t, k, "messageverificationcerts.sandbox.paypal.com"))
			return presetRoute{"webhook_idempotency paypal {\n\tverify paypal {\n\t\twebhook_id WH-CLI-1\n\t}\n}", []string{"--private-key", key, "--webhook-id", "WH-CLI-1",
				"--header", "Paypal-Cert-Url: https://api-m.sandbox.paypal.com/v1/notifications/certs/CERT-cli"}}
		}
		hosts.Serve("/SimpleNotificationService-cli.pem", sigtest.SelfSignedCert(t, k, "sns.amazonaws.com"))
		const topic = "arn:aws:sns:us-east-1:123456789012:cli"
		body := `{"Type":"Notification","MessageId":"cli-sns-1","TopicArn":"` + topic + `","Message":"hello","Timestamp":"2026-12-06T07:36:32.000Z",` +
			`"SignatureVersion":"2","SigningCertURL":"https://sns.us-east-1.amazonaws.com/SimpleNotificationService-cli.pem"}`
		return presetRoute{"webhook_idempotency sns {\n\tclaim TopicArn " + topic + "\n}", []string{"--private-key", key, "--body", body}}
	case "pubsub":
		// Google's key set (a file here, by kid), the subscription's
		// audience and its service account
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		set := writeFile(t, dir, "pubsub-keys.json", sigtest.StoneKeySet(t, map[string]*rsa.PrivateKey{"cli-kid": k}))
		key := writeFile(t, dir, "pubsub.pem", pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k)))
		const audience, account = "https://hooks.example.com/pubsub", "push@cli.iam.gserviceaccount.com"
		return presetRoute{fmt.Sprintf("webhook_idempotency pubsub {\n\tjwks_file %s\n\taudience %s\n\tclaim email %s\n}", set, audience, account),
			[]string{"--private-key", key, "--kid", "cli-kid", "--public-url", audience, "--claim", "email=" + account}}
	case "sendgrid":
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		pubDER, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		key := writeFile(t, dir, "sendgrid.pem", pemBlock("PRIVATE KEY", der))
		return presetRoute{fmt.Sprintf("webhook_idempotency sendgrid {\n\tpublic_key %s\n}", base64.StdEncoding.EncodeToString(pubDER)), []string{"--private-key", key}}
	case "adyen":
		// the HMAC key is hex; the signer writes each item's signature
		secret = hex.EncodeToString([]byte(secret))
		body := `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"CLI0000000000001","merchantAccountCode":"Acme",` +
			`"merchantReference":"order-1","amount":{"value":1000,"currency":"EUR"},"eventCode":"AUTHORISATION","success":"true"}}]}`
		return presetRoute{fmt.Sprintf("webhook_idempotency adyen {\n\tsecret %s\n}", secret), []string{"--secret", secret, "--body", body}}
	case "graph":
		// the signer writes the clientState into each notification
		body := `{"value":[{"id":"cli-n1","subscriptionId":"s1","changeType":"created","resource":"Users/1/Messages/1"}]}`
		return presetRoute{fmt.Sprintf("webhook_idempotency graph {\n\tsecret %s\n}", secret), []string{"--secret", secret, "--body", body}}
	case "eventgrid":
		// the key in the query parameter the subscription's URL carries
		return presetRoute{fmt.Sprintf("webhook_idempotency eventgrid {\n\tverify eventgrid {\n\t\tquery code\n\t\tsecret %s\n\t}\n}", secret),
			[]string{"--secret", secret, "--token-query", "code", "--body", `[{"id":"cli-e1","eventType":"Acme.Cli","subject":"s","data":{},"dataVersion":"1"}]`}}
	case "efi":
		// Efí's fallback without mutual TLS: the hmac token and its address
		return presetRoute{fmt.Sprintf("webhook_idempotency efi {\n\tsecret %s\n\tallow_ips 127.0.0.1\n}", secret), []string{"--secret", secret}}
	}
	return presetRoute{fmt.Sprintf("webhook_idempotency %s {\n\tsecret %s\n}", preset, secret), []string{"--secret", secret}}
}

// indent indents every line of s by one tab.
func indent(s string) string {
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}

// TestSendEveryPreset: for every preset of the table, `send <preset>
// --retry` signs a delivery as the provider does, the route verifies it and
// the application gets it once, and the retry, signed anew, is replayed;
// the command says so.
func TestSendEveryPreset(t *testing.T) {
	dir := t.TempDir()
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q,"call":%d}`, r.URL.Path, call)
	})
	names, unsigned := presets(t)
	hosts := testkit.NewHosts(t, "sns.us-east-1.amazonaws.com", "api-m.sandbox.paypal.com")
	old := keyset.Client
	keyset.Client = hosts.Client()
	t.Cleanup(func() { keyset.Client = old })
	for _, p := range unsigned {
		// a preset added without a signer is refused, not sent unsigned
		if out, code := caddyCLI(t, "webhook-idempotency", "send", p, "--url", "http://127.0.0.1:1/", "--secret", "x"); code == 0 || !strings.Contains(out, "the "+p+" preset "+unsignable) {
			t.Errorf("send %s, which has no signer: exit %d\n%s", p, code, out)
		}
	}
	routes := map[string]presetRoute{}
	var site strings.Builder
	port := testkit.FreePort(t)
	fmt.Fprintf(&site, "http://127.0.0.1:%d {\n\theader >Webhook-Idempotency-Result {http.webhook_idempotency.result}\n", port)
	for _, p := range names {
		routes[p] = routeFor(t, dir, p, hosts)
		fmt.Fprintf(&site, "\thandle /p/%s {\n\t%s\n\t\treverse_proxy %s\n\t}\n", p, indent(routes[p].config), app.Addr())
	}
	// a route told the public URL the provider signs (behind a proxy)
	fmt.Fprintf(&site, "\thandle /p/twilio-public {\n\t\twebhook_idempotency twilio {\n\t\t\tsource twilio_public\n\t\t\tverify twilio {\n\t\t\t\tsecret tw-public\n\t\t\t\turl https://hooks.example.com/sms\n\t\t\t}\n\t\t}\n\t\treverse_proxy %s\n\t}\n", app.Addr())
	site.WriteString("}\n")
	testkit.StartCaddy(t, "", site.String())
	base := testkit.SiteURL(port)

	send := func(t *testing.T, path string, flags ...string) string {
		args := append([]string{"webhook-idempotency", "send"}, flags...)
		args = append(args, "--url", base+path, "--retry")
		out := mustCLI(t, args...)
		for _, want := range []string{"200 OK: new: processed as a new delivery", "replayed: a duplicate, answered from the store", "Idempotent-Replayed: true", `"path":"` + path + `"`} {
			if !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		}
		return out
	}
	for _, p := range names {
		t.Run(p, func(t *testing.T) {
			before := len(app.Requests())
			out := send(t, "/p/"+p, append([]string{p}, routes[p].flags...)...)
			calls := 0
			for _, r := range app.Requests()[before:] {
				if strings.SplitN(r.URI, "?", 2)[0] == "/p/"+p {
					calls++
				}
			}
			if calls != 1 {
				t.Fatalf("the application got %d calls, want 1:\n%s", calls, out)
			}
		})
	}
	t.Run("twilio public url", func(t *testing.T) {
		send(t, "/p/twilio-public", "twilio", "--secret", "tw-public", "--public-url", "https://hooks.example.com/sms")
		// signed for the URL sent to, it does not verify there
		out, code := caddyCLI(t, "webhook-idempotency", "send", "twilio", "--secret", "tw-public", "--url", base+"/p/twilio-public")
		if code == 0 || !strings.Contains(out, "401") || !strings.Contains(out, "the signature did not verify") {
			t.Fatalf("signed for another URL: exit %d\n%s", code, out)
		}
	})
}

// TestSendRefusals: a wrong secret is refused by the route and the command
// fails saying so; a preset that signs with a private key says what it
// needs; an unknown preset lists the presets.
func TestSendRefusals(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency stripe {
		secret whsec_right
	}
	reverse_proxy %s
}
`, port, app.Addr()))
	url := testkit.SiteURL(port) + "/stripe"

	out, code := caddyCLI(t, "webhook-idempotency", "send", "stripe", "--url", url, "--secret", "whsec_wrong")
	if code == 0 || !strings.Contains(out, "401 Unauthorized: refused: the signature did not verify") || !strings.Contains(out, "invalid signature") {
		t.Fatalf("wrong secret: exit %d\n%s", code, out)
	}
	app.WantCalls(t, 0)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"discord", "--url", url}, "discord signs with the application's Ed25519 key, which only Discord holds: give --private-key"},
		{[]string{"stone", "--url", url}, "give --private-key (a signing key whose public half the route's jwks_file holds under --kid) and --encrypt-to"},
		{[]string{"woovi", "--url", url, "--secret", "x"}, "woovi signs with its RSA key, which only Woovi holds"},
		{[]string{"stripe", "--url", url}, "this preset signs with --secret"},
		{[]string{"stirpe", "--url", url, "--secret", "x"}, `Error: unknown preset "stirpe": want one of adyen, asaas, asana,`},
		{[]string{"stripe", "--secret", "x"}, "--url is required"},
	} {
		out, code := caddyCLI(t, append([]string{"webhook-idempotency", "send"}, tc.args...)...)
		if code != 1 || !strings.Contains(out, tc.want) || strings.Contains(out, `"level"`) {
			t.Errorf("send %s: exit %d, want an error saying %q:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
	app.WantCalls(t, 0)
}

// TestSendBodyHeadersAndID: --body @file is sent byte for byte, --header
// adds headers, and --id is the key the preset reads (GitHub's delivery
// header).
func TestSendBodyHeadersAndID(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency github {
		secret gh-cli
	}
	reverse_proxy %s
}`, port, app.Addr()))
	body := `{"action":"opened","number":7,"pull_request":{"title":"CLI"}}`
	file := writeFile(t, t.TempDir(), "push.json", []byte(body))
	out := mustCLI(t, "webhook-idempotency", "send", "github", "--url", testkit.SiteURL(port)+"/gh", "--secret", "gh-cli",
		"--body", "@"+file, "--id", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "--header", "X-GitHub-Event: pull_request")
	if !strings.Contains(out, "delivery 72d3162e-cc78-11e3-81ab-4c9367dc0958") {
		t.Fatalf("output:\n%s", out)
	}
	reqs := app.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d calls", len(reqs))
	}
	r := reqs[0]
	if string(r.Body) != body || r.Header.Get("X-GitHub-Delivery") != "72d3162e-cc78-11e3-81ab-4c9367dc0958" ||
		r.Header.Get("X-GitHub-Event") != "pull_request" || !strings.HasPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=") {
		t.Fatalf("the application got %q with %v", r.Body, r.Header)
	}
}

// TestKeyForgetTail: `key` shows a key's state, `forget` forgets it so
// that the next delivery of it is processed again, and `tail` prints the
// archive's events, then follows new ones as they come.
func TestKeyForgetTail(t *testing.T) {
	app := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency stripe {
		secret whsec_cli
		archive
	}
	reverse_proxy %s
}`, port, app.Addr()))
	admin := fmt.Sprintf("localhost:%d", c.AdminPort)
	url := testkit.SiteURL(port) + "/stripe"
	send := func(id string, retry bool) string {
		args := []string{"webhook-idempotency", "send", "stripe", "--url", url, "--secret", "whsec_cli", "--id", id}
		if retry {
			args = append(args, "--retry")
		}
		return mustCLI(t, args...)
	}
	send("evt_cli_1", true)

	var state map[string]any
	out := mustCLI(t, "webhook-idempotency", "key", "stripe", "evt_cli_1", "--address", admin)
	if err := json.Unmarshal([]byte(out), &state); err != nil || state["state"] != "completed" || state["status"] != float64(200) || state["store_key"] != "idem:stripe:evt_cli_1" {
		t.Fatalf("key: %v\n%s", err, out)
	}
	out = mustCLI(t, "webhook-idempotency", "forget", "stripe", "evt_cli_1", "--address", admin)
	if !strings.Contains(out, "forgot key evt_cli_1 of source stripe") {
		t.Fatalf("forget:\n%s", out)
	}
	out = mustCLI(t, "webhook-idempotency", "key", "stripe", "evt_cli_1", "--address", admin)
	if !strings.Contains(out, `"state": "absent"`) {
		t.Fatalf("key after forget:\n%s", out)
	}
	if out, code := caddyCLI(t, "webhook-idempotency", "forget", "stripe", "evt_cli_1", "--address", admin); code != 1 || !strings.Contains(out, `Error: HTTP 404: key "evt_cli_1" of source "stripe" is absent`) {
		t.Fatalf("forget an absent key: exit %d\n%s", code, out)
	}
	if out, code := caddyCLI(t, "webhook-idempotency", "key", "nosuch", "k", "--address", admin); code == 0 || !strings.Contains(out, "no webhook_idempotency route for source") {
		t.Fatalf("key of an unknown source: exit %d\n%s", code, out)
	}
	// forgotten: processed again
	if out := send("evt_cli_1", false); !strings.Contains(out, "200 OK: not replayed: the application answered it") {
		t.Fatalf("after forget:\n%s", out)
	}
	app.WantCalls(t, 2)
	// a key no URL path can carry
	send("..", false)
	if out := mustCLI(t, "webhook-idempotency", "key", "stripe", "..", "--address", admin); !strings.Contains(out, `"store_key": "idem:stripe:.."`) || !strings.Contains(out, `"state": "completed"`) {
		t.Fatalf("key ..:\n%s", out)
	}
	mustCLI(t, "webhook-idempotency", "forget", "stripe", "..", "--address", admin)
	if out := send("..", false); !strings.Contains(out, "200 OK: not replayed: the application answered it") {
		t.Fatalf("after forgetting ..:\n%s", out)
	}
	app.WantCalls(t, 4)

	// tail: new, replayed, new, oldest first
	out = mustCLI(t, "webhook-idempotency", "tail", "stripe", "--address", admin, "--count", "10")
	line := regexp.MustCompile(`(?m)^\S+Z\s+(new|replayed)\s+200\s+[\d.]+ms\s+POST /stripe\s+evt_cli_1\s+\d+-\d+$`)
	got := line.FindAllStringSubmatch(out, -1)
	if len(got) != 3 || got[0][1] != "new" || got[1][1] != "replayed" || got[2][1] != "new" {
		t.Fatalf("tail:\n%s", out)
	}
	out = mustCLI(t, "webhook-idempotency", "tail", "stripe", "--address", admin, "--result", "replayed", "--json")
	var ev map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &ev); err != nil || ev["result"] != "replayed" || ev["key"] != "evt_cli_1" {
		t.Fatalf("tail --json --result replayed: %v\n%s", err, out)
	}

	// --follow prints what is archived after it started
	cmd := testkit.CaddyCommand("webhook-idempotency", "tail", "stripe", "--address", admin, "--count", "1", "--follow", "--interval", "100ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	want := func(what string, match func(string) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("tail --follow stopped before %s", what)
				}
				if match(l) {
					return
				}
			case <-deadline:
				t.Fatalf("tail --follow printed no line for %s within 30s", what)
			}
		}
	}
	want("the newest event", func(l string) bool { return strings.Contains(l, "POST /stripe  ..  ") })
	send("evt_cli_2", true)
	want("the new delivery", func(l string) bool { return strings.Contains(l, " new ") && strings.Contains(l, "evt_cli_2") })
	want("its retry", func(l string) bool { return strings.Contains(l, " replayed ") && strings.Contains(l, "evt_cli_2") })
	_ = cmd.Process.Kill()
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	wg.Wait()
}
