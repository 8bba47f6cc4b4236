package webhookidempotency

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The alerting rules docs/operating.md recommends ship as a rules file,
// dashboards/alerts.yml, checked here by Prometheus's own promtool: its
// syntax (`promtool check rules`) and its behaviour on series shaped as the
// module exports them (`promtool test rules dashboards/alerts_test.yml`).
// That a running Caddy has every series the rules read, at zero from the
// start, is checked in e2e (TestAlertRulesSeriesExistAtZero).

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
	broken := strings.Replace(testkit.ReadFile(t, "dashboards/alerts.yml"), "increase(caddy_webhook_idempotency_store_restarts_total[10m]) > 0",
		"increase(caddy_webhook_idempotency_store_restarts_total[10m] > 0", 1)
	bad := t.TempDir() + "/alerts.yml"
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", bad).CombinedOutput(); err == nil {
		t.Fatalf("promtool accepted a rule with unbalanced parentheses:\n%s", out)
	}

	rules := rulesBody(testkit.ReadFile(t, "dashboards/alerts.yml"))
	if !strings.Contains(testkit.ReadFile(t, "docs/operating.md"), "```yaml\n"+rules+"```\n") {
		t.Fatal("docs/operating.md does not show dashboards/alerts.yml (without its comment lines) in a yaml fence: keep them the same")
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
