package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A stripe-mock that exits at once (its port taken, say) is tried three
// times and reported with what it said; the test that asked for it fails
// at once rather than waiting for its own timeout.
func TestStartStripeMockReportsAnExit(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stripe-mock")
	script := "#!/bin/sh\necho \"bind: address already in use\" >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tries := 0
	_, _, err := startStripeMock(bin, func() int { tries++; return FreePort(t) })
	if err == nil || !strings.Contains(err.Error(), "stripe-mock exited") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("want the exit reported with stripe-mock's own words, got %v", err)
	}
	if tries != 3 {
		t.Fatalf("started %d times, want 3", tries)
	}
}
