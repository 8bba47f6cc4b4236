package cli

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// `show <source> <key>` prints a key's state and every attempt of its
// event with the application's answers: an inbox event that failed twice
// and was then delivered, and in dedup mode the one answer of an archived
// delivery; `tail` prints each event's attempts below its line.
func TestShowPrintsTheAttempts(t *testing.T) {
	var calls atomic.Int64
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/inbox" {
			if n := calls.Add(1); n <= 2 {
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, "boom %d", n)
				return
			}
		}
		w.Header().Set("X-App", "yes")
		_, _ = io.WriteString(w, `{"received":true}`)
	})
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%[1]d {
	handle /inbox {
		webhook_idempotency {
			source queued
			archive
			inbox {
				deliver_to %[2]s/inbox
				retries 100ms 100ms
				jitter 0%%
			}
		}
	}
	handle /bare {
		webhook_idempotency {
			source bare
			inbox %[2]s/bare
		}
	}
	handle /direct {
		webhook_idempotency {
			source direct
			archive
		}
		reverse_proxy %[3]s
	}
}`, port, app.URL, app.Addr()))
	admin := fmt.Sprintf("localhost:%d", c.AdminPort)
	resp, _ := testkit.Post(t, testkit.SiteURL(port)+"/inbox", []byte(`{"id":"evt_q"}`), "Idempotency-Key", "evt_q")
	resp2, _ := testkit.Post(t, testkit.SiteURL(port)+"/direct", []byte(`{"id":"evt_d"}`), "Idempotency-Key", "evt_d")
	resp3, _ := testkit.Post(t, testkit.SiteURL(port)+"/bare", []byte(`{"id":"evt_b"}`), "Idempotency-Key", "evt_b")
	if resp.StatusCode != http.StatusAccepted || resp2.StatusCode != http.StatusOK || resp3.StatusCode != http.StatusAccepted {
		t.Fatalf("deliveries: %s, %s, %s", resp.Status, resp2.Status, resp3.Status)
	}

	var out string
	testkit.WaitFor(t, 10*time.Second, "three attempts shown", func() (bool, string) {
		out = mustCLI(t, "webhook-idempotency", "show", "queued", "evt_q", "--address", admin)
		return strings.Count(out, "\n  attempt ") == 3, out
	})
	line := regexp.MustCompile(`(?m)^  attempt (\d)  \S+Z\s+(\d{3})\s+[\d.]+ms  ` + regexp.QuoteMeta(app.URL) + `/inbox$`)
	got := line.FindAllStringSubmatch(out, -1)
	if len(got) != 3 || got[0][2] != "500" || got[1][2] != "500" || got[2][2] != "200" ||
		!strings.Contains(out, "\n      boom 1\n") || !strings.Contains(out, "\n      boom 2\n") ||
		!strings.Contains(out, "\n      X-App: yes\n") || !strings.Contains(out, `{"received":true}`) ||
		!strings.HasPrefix(out, "key evt_q of source queued: completed, status 202") || !strings.Contains(out, "archived events, newest first:") {
		t.Fatalf("show of an inbox event:\n%s", out)
	}

	out = mustCLI(t, "webhook-idempotency", "show", "direct", "evt_d", "--address", admin)
	if !regexp.MustCompile(`(?m)^    attempt 1  \S+Z\s+200\s+[\d.]+ms  next$`).MatchString(out) ||
		!strings.Contains(out, "\n        X-App: yes\n") || !strings.Contains(out, `{"received":true}`) {
		t.Fatalf("show of a delivery in dedup mode:\n%s", out)
	}

	// an inbox without an archive: the key's event, its attempts
	testkit.WaitFor(t, 10*time.Second, "evt_b's attempt shown", func() (bool, string) {
		out = mustCLI(t, "webhook-idempotency", "show", "bare", "evt_b", "--address", admin)
		return strings.Contains(out, "\n  attempt 1  "), out
	})
	if !regexp.MustCompile(`(?m)^  attempt 1  \S+Z\s+200\s+[\d.]+ms  `+regexp.QuoteMeta(app.URL)+`/bare$`).MatchString(out) ||
		strings.Contains(out, "archived") {
		t.Fatalf("show of an inbox event without an archive:\n%s", out)
	}

	out = mustCLI(t, "webhook-idempotency", "tail", "queued", "--address", admin)
	if !regexp.MustCompile(`(?m)^\S+Z\s+new\s+202 .* evt_q .*\n    attempt 1  \S+Z\s+500 .*\n    attempt 2 .*\n    attempt 3  \S+Z\s+200 `).MatchString(out) ||
		strings.Contains(out, "boom") {
		t.Fatalf("tail, the attempts without their answers:\n%s", out)
	}
}
