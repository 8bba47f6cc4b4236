// Package redise2e holds the black-box end-to-end tests of
// webhook_idempotency on real Redis servers (standalone, Cluster and
// Sentinel) and of its reliability under hostile clients and failures: a
// real Caddy built with the module runs in the test process (and, for a
// second instance, as a child process) in front of a real upstream
// (internal/testkit). The tests see what a provider, an application and an
// operator see: HTTP answers, what the application received, the admin
// endpoint's metrics, Caddy's logs, and Redis itself. Tests that start
// Caddy do not run in parallel (Caddy runs one configuration per process).
package redise2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

func TestMain(m *testing.M) { testkit.RunAsCaddy(); testkit.Main(m) }

// redisChaosSite is a site whose handler uses srv with a 500ms timeout
// and the fail policy fail.
func redisChaosSite(port int, srv *testkit.Redis, fail, upstream string) string {
	return redisTimeoutSite(port, srv, fail, upstream, "500ms")
}

// redisTimeoutSite is redisChaosSite with the store's timeout: a test
// whose calls must succeed before or after an outage gives them what they
// take on a loaded machine.
func redisTimeoutSite(port int, srv *testkit.Redis, fail, upstream, timeout string) string {
	return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source chaos
		fail %s
		store redis redis://%s {
			timeout %s
		}
	}
	reverse_proxy %s
}`, port, fail, srv.Addr(), timeout, upstream)
}

// waitForDedup posts a fresh key twice until the second is a replay.
func waitForDedup(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; ; i++ {
		key := fmt.Sprintf("evt_resume_%d_%d", time.Now().UnixNano(), i)
		testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		resp, _ := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		if resp.Header.Get(testkit.ReplayedHeader) == "true" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deduplication did not resume within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// traffic sends requests with fresh keys from a few workers, each one
// after the other, until stopped, and records every answer that is not
// the upstream's 200.
type traffic struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	sent     atomic.Int64
	resets   atomic.Int64
	mu       sync.Mutex
	failure  []string
}

// startTraffic starts workers that each post fresh keys to url; with
// duplicate, every key is sent twice. The traffic stops when the test
// ends, if finish has not stopped it before.
func startTraffic(t *testing.T, url string, workers int, duplicate bool) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				key := fmt.Sprintf("evt_traffic_%d_%d_%d", w, i, time.Now().UnixNano())
				n := 1
				if duplicate {
					n = 2
				}
				for range n {
					tr.send(url, key)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(tr.done) }()
	t.Cleanup(func() { tr.finish() })
	return tr
}

// send posts key once, as a provider would: a request that gets no HTTP
// answer at all (a connection reset while Caddy hands its listener over)
// is sent again, until it gets one. The first attempt may have reached
// Caddy and still be in flight, so a retry may get a 409; the provider
// then retries again later. Only an answer that is not 200 in the end is
// a failure.
func (tr *traffic) send(url, key string) {
	post := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(key))
		req.Header.Set("Idempotency-Key", key)
		return testkit.Client.Do(req)
	}
	resp, err := post()
	tr.sent.Add(1)
	if err != nil {
		tr.resets.Add(1)
		// a provider retries until it gets an answer: another reset (the
		// next reload) or a 409 (the first attempt still in flight, for as
		// long as a loaded machine takes to finish it) is retried after a
		// provider's pause, for up to a minute
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			resp, err = post()
			if err == nil && resp.StatusCode != http.StatusConflict {
				break
			}
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err != nil {
		tr.fail(err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tr.fail(fmt.Sprintf("%s: status %d", key, resp.StatusCode))
	}
}

func (tr *traffic) fail(s string) {
	tr.mu.Lock()
	tr.failure = append(tr.failure, s)
	tr.mu.Unlock()
}

// waitSent waits until the workers have sent n requests in all.
func (tr *traffic) waitSent(t *testing.T, n int64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d requests sent", n), func() (bool, string) {
		sent := tr.sent.Load()
		return sent >= n, fmt.Sprintf("%d sent", sent)
	})
}

// finish stops the traffic and returns the failures.
func (tr *traffic) finish() []string {
	tr.stopOnce.Do(func() { close(tr.stop) })
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.failure
}
