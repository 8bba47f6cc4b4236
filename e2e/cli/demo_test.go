package cli

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestDemo: the demo, Caddyfile.example, runs as the README says (`caddy
// run --config Caddyfile.example`) on the ports its environment variables
// give, listens on 127.0.0.1 only (127.0.0.2, loopback too, is refused),
// serves its console at 127.0.0.1 and at localhost, deduplicates its
// generic endpoint, and its Stripe route answers trigger and send with
// what it did.
func TestDemo(t *testing.T) {
	port, appPort, consolePort, adminPort := testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)
	cmd := testkit.CaddyCommand("run", "--config", "../../Caddyfile.example")
	cmd.Env = append(cmd.Env, "XDG_DATA_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir(),
		"DEMO_PORT="+strconv.Itoa(port), "DEMO_APP_PORT="+strconv.Itoa(appPort),
		"DEMO_CONSOLE_PORT="+strconv.Itoa(consolePort), "DEMO_ADMIN="+fmt.Sprintf("localhost:%d", adminPort))
	log, err := os.CreateTemp(t.TempDir(), "demo-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testkit.WaitFor(t, 60*time.Second, "the demo's sites and admin endpoint", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("the demo exited: %v\n%s", err, out)
		default:
		}
		for _, addr := range []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", appPort), fmt.Sprintf("127.0.0.1:%d", consolePort), fmt.Sprintf("localhost:%d", adminPort)} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return false, err.Error()
			}
			c.Close()
		}
		return true, ""
	})
	for _, p := range []int{port, appPort, consolePort} {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.2:%d", p)); err == nil {
			c.Close()
			t.Errorf("port %d answers on 127.0.0.2: the demo listens beyond 127.0.0.1", p)
		}
	}

	// the console, at each loopback name: the page, and the sources from
	// its API (a site for localhost alone left 127.0.0.1 an empty 200)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		console := fmt.Sprintf("http://%s:%d/", host, consolePort)
		if resp, b := testkit.Do(t, http.MethodGet, console, nil); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `name="webhook-idempotency-api" content="api/"`) {
			t.Fatalf("the demo's console at %s: %s %.200q", console, resp.Status, b)
		}
		if resp, b := testkit.Do(t, http.MethodGet, console+"api/", nil); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"source":"stripe"`) {
			t.Fatalf("the demo console's sources at %s: %s %.200q", console, resp.Status, b)
		}
	}

	post := func() *http.Response {
		resp, _ := testkit.Post(t, base+"/webhooks/demo", []byte(`{"id":"evt_demo"}`), "Idempotency-Key", "evt_demo")
		return resp
	}
	if first, second := post(), post(); first.StatusCode != 200 || first.Header.Get(testkit.ReplayedHeader) != "" || second.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("demo endpoint: %s %v, then %s %v", first.Status, first.Header, second.Status, second.Header)
	}
	out := mustCLI(t, "webhook-idempotency", "trigger", "stripe", "payment_intent.created", "--url", base+"/webhooks/stripe", "--secret", "whsec_demo", "--retry")
	if !strings.Contains(out, "200 OK: new: processed as a new delivery") || !strings.Contains(out, `"processed_by":"app"`) || !strings.Contains(out, "replayed: a duplicate") {
		t.Fatalf("trigger at the demo:\n%s", out)
	}
	out = mustCLI(t, "webhook-idempotency", "tail", "stripe", "--address", fmt.Sprintf("localhost:%d", adminPort))
	if strings.Count(out, "POST /webhooks/stripe") != 2 {
		t.Fatalf("tail stripe:\n%s", out)
	}
}
