package testkit

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Stripe's own API simulator, stripe-mock (github.com/stripe/stripe-mock):
// it validates each request against Stripe's OpenAPI description
// (parameters, their types, authentication) and answers from Stripe's
// fixtures. `make test` installs it (`go install
// github.com/stripe/stripe-mock@v0.203.0`). A test never skips for want of
// it: it fails, saying how to install it.

// StripeMockVersion is the stripe-mock the Makefile installs.
const StripeMockVersion = "v0.203.0"

// StripeMock is one stripe-mock process started by a test.
type StripeMock struct {
	// URL is its API, as api_url takes it: http://127.0.0.1:<port>.
	URL string
}

// StripeMockPath returns the stripe-mock binary: on PATH, or where `go
// install` puts it (GOBIN, else GOPATH/bin). It fails the test when there
// is none.
func StripeMockPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var dirs []string
		if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
			dirs = append(dirs, strings.TrimSpace(lines[0]))
		}
		if len(lines) > 1 {
			for gp := range strings.SplitSeq(strings.TrimSpace(lines[1]), string(os.PathListSeparator)) {
				if gp != "" {
					dirs = append(dirs, filepath.Join(gp, "bin"))
				}
			}
		}
		for _, d := range dirs {
			p := filepath.Join(d, "stripe-mock")
			if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	t.Fatalf("stripe-mock not found on PATH, in GOBIN or in GOPATH/bin: the reconciliation tests check their requests against Stripe's API simulator; install it with `go install github.com/stripe/stripe-mock@%s` or run `make test`, which installs it", StripeMockVersion)
	return ""
}

// StartStripeMock starts stripe-mock on a free port (its HTTPS listener on
// another, unused) and waits until it answers; it is stopped when the test
// ends.
func StartStripeMock(t testing.TB) *StripeMock {
	t.Helper()
	sm, stop, err := startStripeMock(StripeMockPath(t), func() int { return FreePort(t) })
	if err != nil {
		t.Fatalf("starting stripe-mock: %v", err)
	}
	t.Cleanup(stop)
	return sm
}

// startStripeMock starts the stripe-mock binary bin on a port that port
// gives, three times at most (the free port may be taken before
// stripe-mock binds it), and returns it with the function that stops it.
// A stripe-mock that exits is an error, never a wait.
func startStripeMock(bin string, port func() int) (*StripeMock, func(), error) {
	var lastErr error
	for range 3 {
		addr := "127.0.0.1:" + strconv.Itoa(port())
		var log strings.Builder
		// stripe-mock also listens for HTTPS, on 12112 unless told
		// otherwise: a port of the system's choosing, so that two
		// stripe-mocks (two test packages at once) never meet there
		cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", "127.0.0.1:")
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		// closed once the process is gone: waiting on it again never
		// blocks, as waiting for a value waitStripeMock took would
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		if lastErr = waitStripeMock(addr, exited); lastErr == nil {
			return &StripeMock{URL: "http://" + addr}, stop, nil
		}
		stop()
		lastErr = fmt.Errorf("%v\n%s", lastErr, log.String())
	}
	return nil, nil, lastErr
}

// waitStripeMock waits until stripe-mock at addr answers an authenticated
// request, or exits.
func waitStripeMock(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("stripe-mock exited")
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/balance", nil)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("stripe-mock did not answer on %s within 30 s", addr)
}
