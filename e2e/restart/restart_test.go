// Package restart runs Caddy built with the module as a process of its own
// (this test binary run again as `caddy run`), kills it with SIGKILL under
// load or stops it gracefully, starts it again on the same data
// directory, and checks what the file store, the default store, kept:
// every delivery answered before the stop is replayed after it, and every
// event the inbox accepted is delivered.
package restart

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/webhookguard/caddy-webhook-idempotency"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// envCaddy makes this test binary run Caddy's main with the rest of its
// arguments.
const envCaddy = "RESTART_TEST_RUN_CADDY"

func TestMain(m *testing.M) {
	if os.Getenv(envCaddy) == "1" {
		caddycmd.Main()
		return
	}
	os.Exit(m.Run())
}

// caddyProcess is a Caddy running as a child process.
type caddyProcess struct {
	t       *testing.T
	cmd     *exec.Cmd
	dataDir string
	config  string
	admin   int // the admin endpoint's port
	log     *bytes.Buffer
	exited  chan struct{}
}

// startCaddyProcess runs Caddy with the Caddyfile sites (a free admin port,
// no HTTPS), its data in dataDir (where the file store is by default),
// and waits until it answers on probe.
func startCaddyProcess(t *testing.T, dataDir, sites, probe string) *caddyProcess {
	t.Helper()
	admin := testkit.FreePort(t)
	config := filepath.Join(t.TempDir(), "Caddyfile")
	body := fmt.Sprintf("{\n\tadmin localhost:%d\n\tauto_https off\n\tpersist_config off\n}\n%s\n", admin, sites)
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p := runCaddyProcess(t, dataDir, config, probe)
	p.admin = admin
	return p
}

func runCaddyProcess(t *testing.T, dataDir, config, probe string) *caddyProcess {
	t.Helper()
	p := &caddyProcess{t: t, dataDir: dataDir, config: config, log: new(bytes.Buffer), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "run", "--config", config, "--adapter", "caddyfile")
	p.cmd.Env = append(os.Environ(), envCaddy+"=1", "XDG_DATA_HOME="+dataDir, "XDG_CONFIG_HOME="+dataDir)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(p.kill)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("caddy exited at start:\n%s", p.log)
		default:
		}
		if resp, err := http.Get(probe); err == nil {
			resp.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not answer %s within 30s:\n%s", probe, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops the process at once, as a crash would.
func (p *caddyProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop stops the process gracefully (SIGTERM, as systemd does).
func (p *caddyProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("caddy did not stop within 30s of SIGTERM:\n%s", p.log)
	}
}

// keyedUpstream counts the requests it receives per Idempotency-Key; it
// answers X-Answer-Size bytes when the request asks for them.
type keyedUpstream struct {
	*testkit.Upstream
	mu     sync.Mutex
	byKey  map[string]int
	status atomic.Int32 // the status it answers, 200 unless set
}

func newKeyedUpstream(t *testing.T) *keyedUpstream {
	u := &keyedUpstream{byKey: make(map[string]int)}
	u.status.Store(http.StatusOK)
	u.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		u.mu.Lock()
		u.byKey[r.Header.Get("Idempotency-Key")]++
		u.mu.Unlock()
		w.WriteHeader(int(u.status.Load()))
		if n, _ := strconv.Atoi(r.Header.Get("X-Answer-Size")); n > 0 {
			_, _ = w.Write(bytes.Repeat([]byte("x"), n))
			return
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	return u
}

func (u *keyedUpstream) calls(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.byKey[key]
}

// load posts new keys from workers goroutines until stop is closed, and
// returns the keys whose delivery was answered 200 as a new delivery;
// count counts them as they are answered.
func load(url string, workers int, stop <-chan struct{}, count *atomic.Int64) <-chan []string {
	out := make(chan []string, 1)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	go func() {
		var mu sync.Mutex
		var answered []string
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("load-%d-%d-%d", time.Now().UnixNano(), w, i)
					req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"`+key+`"}`))
					req.Header.Set("Idempotency-Key", key)
					resp, err := client.Do(req)
					if err != nil {
						continue // the process was killed under it
					}
					_, rerr := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if rerr == nil && resp.StatusCode == http.StatusOK && resp.Header.Get("Idempotent-Replayed") == "" {
						mu.Lock()
						answered = append(answered, key)
						mu.Unlock()
						count.Add(1)
					}
				}
			})
		}
		wg.Wait()
		out <- answered
	}()
	return out
}

// restartUnderLoad loads Caddy with new deliveries, stops it with halt
// while hundreds are in flight, starts it again on the same data and
// checks that every delivery answered before the stop is replayed.
func restartUnderLoad(t *testing.T, storeLine string, halt func(*caddyProcess)) {
	up := newKeyedUpstream(t)
	data := t.TempDir()
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source restart
		%s
	}
	reverse_proxy %s
}`, port, storeLine, up.Addr())
	p := startCaddyProcess(t, data, sites, testkit.SiteURL(port)+"/")
	stop := make(chan struct{})
	var count atomic.Int64
	results := load(url, 200, stop, &count)
	// halted once hundreds are answered, however loaded the machine is,
	// with 200 more in flight
	testkit.Eventually(t, 60*time.Second, "300 deliveries answered under load", func() bool { return count.Load() >= 300 })
	halt(p)
	close(stop)
	answered := <-results
	if len(answered) < 200 {
		t.Fatalf("only %d deliveries answered before the stop: the load did not reach the store", len(answered))
	}
	runCaddyProcess(t, data, p.config, testkit.SiteURL(port)+"/")
	notReplayed := 0
	for _, key := range answered {
		resp, _ := testkit.Post(t, url, []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key)
		if resp.Header.Get("Idempotent-Replayed") != "true" {
			notReplayed++
		}
		if n := up.calls(key); n != 1 {
			t.Errorf("%s reached the application %d times", key, n)
		}
	}
	if notReplayed > 0 {
		t.Fatalf("%d of %d deliveries answered before the stop were processed again after it", notReplayed, len(answered))
	}
	t.Logf("%d deliveries answered before the stop, all replayed after it", len(answered))
}

func TestKillUnderLoadKeepsEveryAnsweredDelivery(t *testing.T) {
	restartUnderLoad(t, "", (*caddyProcess).kill)
}

func TestKillUnderLoadSyncInterval(t *testing.T) {
	// a process crash loses nothing with `sync <interval>` either: every
	// completion is written at once, only its fsync waits
	restartUnderLoad(t, "store file { \n\t\t\tsync 1s\n\t\t}", (*caddyProcess).kill)
}

func TestGracefulRestartUnderLoad(t *testing.T) {
	restartUnderLoad(t, "", (*caddyProcess).stop)
}

// TestKillKeepsEveryAcceptedInboxEvent: the application fails every
// delivery while events are accepted, so they are in delivery or waiting
// for a retry when Caddy is killed; after the restart every accepted event
// is delivered, and its duplicates are answered as accepted.
func TestKillKeepsEveryAcceptedInboxEvent(t *testing.T) {
	up := newKeyedUpstream(t)
	up.status.Store(http.StatusServiceUnavailable)
	data := t.TempDir()
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	// retries enough that no event is dead by the kill, however long a
	// loaded machine takes to accept the 300 (each failed attempt spends
	// one)
	sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source restart_inbox
		inbox %s {
			retries %s
			jitter 0%%
			timeout 2s
		}
	}
}`, port, up.URL, strings.TrimSpace(strings.Repeat("200ms ", 300)))
	p := startCaddyProcess(t, data, sites, testkit.SiteURL(port)+"/")
	var accepted []string
	for i := range 300 {
		key := fmt.Sprint("inbox-", i)
		resp, _ := testkit.Post(t, url, []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accepting %s: %d", key, resp.StatusCode)
		}
		accepted = append(accepted, key)
	}
	time.Sleep(300 * time.Millisecond) // some in delivery, some waiting for a retry
	p.kill()
	up.status.Store(http.StatusOK)
	runCaddyProcess(t, data, p.config, testkit.SiteURL(port)+"/")
	testkit.Eventually(t, 60*time.Second, "every accepted event delivered after the restart", func() bool {
		for _, key := range accepted {
			if up.calls(key) == 0 {
				return false
			}
		}
		return true
	})
	for _, key := range accepted[:20] {
		resp, _ := testkit.Post(t, url, []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a duplicate of %s after the restart: %d, replayed %q", key, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}
}
