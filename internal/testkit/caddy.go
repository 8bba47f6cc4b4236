package testkit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// Caddy is a Caddy running in the test process; the packages that use it
// import the modules they configure (the standard modules and this
// module's, as cmd/caddy does).
type Caddy struct {
	t *testing.T
	// AdminPort is the port of Caddy's admin endpoint.
	AdminPort int
	globals   string
}

// StartCaddy adapts and loads a Caddyfile made of the harness's global
// options (a free admin port, no HTTPS, logs discarded), extra global
// options, and sites. Caddy gets a data directory of its own for the test
// (where the file store, the default store, keeps its file). It stops
// Caddy when the test ends.
func StartCaddy(t *testing.T, globals, sites string) *Caddy {
	t.Helper()
	OwnDataDir(t)
	c := &Caddy{t: t, AdminPort: FreePort(t), globals: globals}
	if err := caddy.Load(c.Adapt(sites), true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, sites)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Logf("stopping caddy: %v", err)
		}
	})
	return c
}

// Caddyfile returns the whole Caddyfile for sites.
func (c *Caddy) Caddyfile(sites string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	auto_https off
	persist_config off
	grace_period 2s
	log default {
		output discard
	}
	%s
}
%s
`, c.AdminPort, c.globals, sites)
}

// Adapt turns sites into JSON config.
func (c *Caddy) Adapt(sites string) []byte {
	c.t.Helper()
	cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(c.Caddyfile(sites)), nil)
	if err != nil {
		c.t.Fatalf("adapting Caddyfile: %v\n%s", err, c.Caddyfile(sites))
	}
	for _, w := range warnings {
		c.t.Logf("adapt warning: %s", w.String())
	}
	return cfg
}

// AdminURL is the URL of a path on the admin endpoint.
func (c *Caddy) AdminURL(path string) string {
	return fmt.Sprintf("http://localhost:%d%s", c.AdminPort, path)
}

// Reload loads new sites through the admin API, as `caddy reload` does.
// Every load replaces Caddy's admin server and shuts the old one down
// while it answers: each load goes out on a new connection (a kept-alive
// one belongs to the old server), and one that gets no HTTP answer at all
// (its connection reached the old listener as it closed) is sent again,
// for as long as PostAfterReload would; loading the same config twice is
// harmless.
func (c *Caddy) Reload(sites string) error {
	cfg := c.Adapt(sites)
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(reloadRetries); ; {
		req, _ := http.NewRequest(http.MethodPost, c.AdminURL("/load"), bytes.NewReader(cfg))
		req.Header.Set("Content-Type", "application/json")
		// a reload of an identical config is skipped unless forced
		req.Header.Set("Cache-Control", "must-revalidate")
		if resp, err = NewConnectionClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("reload: %s: %s", resp.Status, b)
	}
	// The old servers have closed their connections, but a client may not
	// have read the close yet and reuse one: a POST on it fails with EOF.
	Client.CloseIdleConnections()
	return nil
}

// OwnDataDir gives the test a data directory of its own (caddy.AppDataDir,
// where the file store is by default) and returns it. It sets
// XDG_DATA_HOME for the test, so the test must not run in parallel.
func OwnDataDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", dir)
	return filepath.Join(dir, "caddy")
}

// Main runs a package's tests with a data directory of the process's own
// (XDG_DATA_HOME), removed afterwards: no test, parallel or not, opens the
// file store of the user running the tests or of another test process.
// Use it as TestMain: `func TestMain(m *testing.M) { testkit.Main(m) }`.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "webhook-idempotency-data-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "making a data directory for the tests:", err)
		os.Exit(1)
	}
	os.Setenv("XDG_DATA_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// provisionMu serializes NewContext's provisioning.
var provisionMu sync.Mutex

// NewContext returns a context of a real, empty configuration, like the
// one Caddy provisions a config's modules in (apps are made in it on first
// use); cancel cleans up the modules loaded through it. The configuration
// is never started.
func NewContext(t testing.TB) (caddy.Context, context.CancelFunc) {
	t.Helper()
	// only errors reach the log, as in a quiet test run
	quiet := &caddy.Logging{Logs: map[string]*caddy.CustomLog{"default": {BaseLog: caddy.BaseLog{Level: "ERROR"}}}}
	// provisioning sets process-wide state (certmagic's default storage):
	// parallel tests take turns
	provisionMu.Lock()
	cfgCtx, err := caddy.ProvisionContext(&caddy.Config{Logging: quiet})
	provisionMu.Unlock()
	if err != nil {
		t.Fatalf("provisioning an empty configuration: %v", err)
	}
	return caddy.NewContext(cfgCtx)
}
