package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestMigrate: `migrate` refuses a file a running Caddy holds, with one
// sentence on stderr and nothing claimed as copied; once Caddy is stopped it
// copies the live records into Redis, with their time left, and a second
// run leaves them as they are.
func TestMigrate(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := testkit.NewUpstream(t, nil)
	file := filepath.Join(t.TempDir(), "webhooks.db")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency stripe {
		secret whsec_migrate
		store file %s
	}
	reverse_proxy %s
}
`, port, file, app.Addr()))
	for _, id := range []string{"evt_m1", "evt_m2"} {
		mustCLI(t, "webhook-idempotency", "send", "stripe", "--url", testkit.SiteURL(port)+"/stripe", "--secret", "whsec_migrate", "--id", id)
	}
	migrate := func() (stdout, stderr string, code int) {
		cmd := testkit.CaddyCommand("webhook-idempotency", "migrate", "--from", file, "--to", "redis://"+srv.Addr())
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	stdout, stderr, code := migrate()
	if code != 1 || stdout != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 ||
		!strings.HasPrefix(stderr, "Error: file store: "+file+" is in use: stop the Caddy that has it open first") {
		t.Fatalf("while Caddy holds the file: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	rdb := srv.Client(t)
	if n, _ := rdb.DBSize(context.Background()).Result(); n != 0 {
		t.Fatalf("Redis holds %d keys after a refused migration", n)
	}

	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = migrate()
	if code != 0 || !strings.Contains(stdout, "copied 2 records from "+file+"; 0 keys Redis held already") {
		t.Fatalf("Caddy stopped: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, key := range []string{"idem:stripe:evt_m1", "idem:stripe:evt_m2"} {
		if ttl, err := rdb.TTL(context.Background(), key).Result(); err != nil || ttl <= 0 {
			t.Fatalf("%s: ttl %v, %v", key, ttl, err)
		}
	}
	if stdout, _, code = migrate(); code != 0 || !strings.Contains(stdout, "copied 0 records from "+file+"; 2 keys Redis held already were left as they are") {
		t.Fatalf("again: exit %d\n%s", code, stdout)
	}
}
