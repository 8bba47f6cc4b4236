package webhookidempotency

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestMakeHelpListsEveryTarget: `make help` lists every target of the
// Makefile, each with its help text.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make not found on PATH: install make (apt-get install make)")
	}
	out, err := exec.Command("make", "--no-print-directory", "help").CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if name, text, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			listed[name] = strings.TrimSpace(text)
		}
	}
	targets := regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllStringSubmatch(testkit.ReadFile(t, "Makefile"), -1)
	if len(targets) < 8 {
		t.Fatalf("found %d targets in the Makefile", len(targets))
	}
	for _, m := range targets {
		if listed[m[1]] == "" {
			t.Errorf("make help does not list %q with its help text:\n%s", m[1], out)
		}
	}
}
