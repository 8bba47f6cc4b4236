package webhookidempotency

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The alerting rules docs/operating.md recommends ship as a rules file,
// dashboards/alerts.yml, checked here by Prometheus's own promtool: its
// syntax (`promtool check rules`) and its behaviour on series shaped as the
// module exports them (`promtool test rules dashboards/alerts_test.yml`).

// promtoolPath returns the promtool binary, failing the test when there is
// none: `make test` installs Debian's prometheus package, which has it.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found on PATH: the alerting rules are checked by Prometheus's own tool; install Debian's prometheus package (apt-get install prometheus) or run `make test`, which installs it")
	}
	return p
}

// TestAlertRules runs promtool on the rules file and its unit tests, and
// checks that docs/operating.md shows the rules file as it is.
func TestAlertRules(t *testing.T) {
	promtool := promtoolPath(t)
	for _, args := range [][]string{
		{"check", "rules", "dashboards/alerts.yml"},
		{"test", "rules", "dashboards/alerts_test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// a broken rule is caught: promtool is really judging the file
	broken := strings.Replace(readFile(t, "dashboards/alerts.yml"), "increase(caddy_webhook_idempotency_store_restarts_total[10m]) > 0",
		"increase(caddy_webhook_idempotency_store_restarts_total[10m] > 0", 1)
	bad := t.TempDir() + "/alerts.yml"
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", bad).CombinedOutput(); err == nil {
		t.Fatalf("promtool accepted a rule with unbalanced parentheses:\n%s", out)
	}

	rules := rulesBody(readFile(t, "dashboards/alerts.yml"))
	if !strings.Contains(readFile(t, "docs/operating.md"), "```yaml\n"+rules+"```\n") {
		t.Fatal("docs/operating.md does not show dashboards/alerts.yml (without its comment lines) in a yaml fence: keep them the same")
	}
}

// TestAlertRulesSeriesExistAtZero: every metric the rules read has series
// from the first provision on, before any traffic, at zero (a file store
// healthy at one), so that a rule on its rate or increase sees the first
// event (the first Redis restart, the first file lost, above all).
func TestAlertRulesSeriesExistAtZero(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	file := t.TempDir() + "/alerts.db"
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source alerts
		fail closed
		store redis redis://%s
		archive
	}
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source alerts_file
		store file %s
	}
	reverse_proxy %s
}`, testkit.FreePort(t), srv.Addr(), up.Addr(), testkit.FreePort(t), file, up.Addr()))
	m := c.Metrics(t)
	names := regexp.MustCompile(`caddy_webhook_idempotency_[a-z_]+`).FindAllString(readFile(t, "dashboards/alerts.yml"), -1)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 3 {
		t.Fatalf("the rules read %v", names)
	}
	for _, name := range names {
		found := false
		for _, line := range strings.Split(m.Raw, "\n") {
			// this Caddy's series: the test process's other tests count too
			ours := strings.Contains(line, `source="alerts"`) || strings.Contains(line, `address="`+srv.Addr()+`"`) ||
				strings.Contains(line, `path="`+file+`"`)
			if strings.HasPrefix(line, name+"{") && ours {
				found = true
				want := " 0"
				if name == "caddy_webhook_idempotency_store_file_healthy" {
					want = " 1"
				}
				if !strings.HasSuffix(line, want) {
					t.Errorf("before any traffic: %s", line)
				}
			}
		}
		if !found {
			t.Errorf("%s, which the rules read, has no series of this Caddy after the provision", name)
		}
	}
	if v, ok := m.Value("caddy_webhook_idempotency_store_restarts_total", "address", srv.Addr()); !ok || v != 0 {
		t.Errorf("store_restarts_total{address=%q}: %v (present %v), want 0", srv.Addr(), v, ok)
	}
	if v, ok := m.Value("caddy_webhook_idempotency_requests_total", "source", "alerts", "result", "unavailable"); !ok || v != 0 {
		t.Errorf("requests_total{source=alerts,result=unavailable}: %v (present %v), want 0", v, ok)
	}
}

// rulesBody is a rules file without its leading comment lines.
func rulesBody(s string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if b.Len() == 0 && strings.HasPrefix(line, "#") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
