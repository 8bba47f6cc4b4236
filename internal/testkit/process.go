package testkit

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// A Caddy as a process of its own, for the tests that need another Caddy
// instance beside the one in the test process, or a Caddy to kill: the
// test binary runs itself again as `caddy run` (it holds every module the
// package imports). A package that uses StartProcess calls RunAsCaddy
// first in its TestMain:
//
//	func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// envRunCaddy makes the test binary run Caddy's command line.
const envRunCaddy = "WEBHOOK_IDEMPOTENCY_TEST_RUN_CADDY"

// RunAsCaddy runs Caddy's command line, and exits, when this test binary
// was started by StartProcess; otherwise it returns at once.
func RunAsCaddy() {
	if os.Getenv(envRunCaddy) == "1" {
		caddycmd.Main()
		os.Exit(0)
	}
}

// CaddyCommand returns a command that runs Caddy's command line with args
// (`webhook-idempotency send …`, say) in this test binary, which holds
// every module and command the package imports: the package's TestMain
// calls RunAsCaddy first.
func CaddyCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunCaddy+"=1")
	return cmd
}

// Process is a Caddy running as a child process of the test.
type Process struct {
	// AdminPort is the port of its admin endpoint.
	AdminPort int
	t         testing.TB
	cmd       *exec.Cmd
	log       string
	exited    chan struct{}
}

// AdminURL is the URL of a path on the process's admin endpoint.
func (p *Process) AdminURL(path string) string {
	return fmt.Sprintf("http://localhost:%d%s", p.AdminPort, path)
}

// StartProcess runs Caddy with the Caddyfile of the harness's global
// options (a free admin port, no HTTPS), globals, and sites, with a data
// directory of its own, and waits until it answers ready (a URL of one of
// its sites). The process is killed when the test ends; a data race it
// reported fails the test.
func StartProcess(t testing.TB, globals, sites, ready string) *Process {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "Caddyfile")
	admin := FreePort(t)
	body := fmt.Sprintf("{\n\tadmin localhost:%d\n\tauto_https off\n\tpersist_config off\n\t%s\n}\n%s\n", admin, globals, sites)
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Process{AdminPort: admin, t: t, log: filepath.Join(dir, "caddy.log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(os.Args[0], "run", "--config", config, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), envRunCaddy+"=1", "HOME="+dir,
		"XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting caddy as %s: %v", os.Args[0], err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.Kill()
		if b, _ := os.ReadFile(p.log); strings.Contains(string(b), "WARNING: DATA RACE") {
			t.Errorf("the caddy process reported a data race:\n%s", b)
		}
	})

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("the caddy process exited before answering:\n%s", p.Log())
		default:
		}
		resp, err := client.Get(ready)
		if err == nil {
			resp.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the caddy process did not answer %s within 30s: %v\n%s", ready, err, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the process at once (SIGKILL), as a crash would, and waits
// for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Errorf("the caddy process did not exit within 10s of SIGKILL")
	}
}

// Log is what the process wrote so far; its last 8000 bytes.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}
