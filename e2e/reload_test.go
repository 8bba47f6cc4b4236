package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// A reload that moves the file store to another path, under load: every
// request completes in the file it claimed in, whatever the reloads do
// (docs/stores.md, "One process"). Before, the old file closed with the
// old configuration while its requests were still running: over 12
// reloads at about 60 requests a second, 19 deliveries answered 2xx were
// never recorded ("file store: … is closed"), and ran again when resent.
func TestReloadMovingTheFileStoreUnderLoad(t *testing.T) {
	// with an archive, a completion carries its event in the same commit
	for name, archive := range map[string]string{"plain": "", "archive": "archive"} {
		t.Run(name, func(t *testing.T) { reloadMovingTheFileStore(t, archive) })
	}
}

func reloadMovingTheFileStore(t *testing.T, archive string) {
	const (
		workers = 12 // each delivery takes 200 ms: about 60 a second
		reloads = 12
		lease   = 2 * time.Second
	)
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")}
	logPath := filepath.Join(dir, "caddy.log")

	var mu sync.Mutex
	calls := map[string]int{}
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		calls[key]++
		mu.Unlock()
		time.Sleep(200 * time.Millisecond) // the application's work
		fmt.Fprintf(w, `{"key":%q}`, key)
	})
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	site := func(path string) string {
		return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source moved
		lease %s
		store file %s
		%s
	}
	reverse_proxy %s
}`, port, lease, path, archive, up.Addr())
	}
	c := testkit.StartCaddy(t, fmt.Sprintf(`log capture {
		output file %s
		level DEBUG
		include http.handlers.webhook_idempotency http.webhook_idempotency
	}`, logPath), site(paths[0]))

	// the load: fresh keys; a key whose request got no answer at all (a
	// connection handed over by a reload) is dropped, not sent again
	var answered []string
	var answeredN atomic.Int64
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 20 * time.Second}
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("moved-%d-%d", w, i)
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"id":"`+key+`"}`))
				req.Header.Set("Idempotency-Key", key)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				switch {
				case rerr == nil && resp.StatusCode == http.StatusOK && resp.Header.Get(testkit.ReplayedHeader) == "" && string(b) == `{"key":"`+key+`"}`:
					answered = append(answered, key)
					answeredN.Add(1)
				case rerr == nil:
					failures = append(failures, fmt.Sprintf("%s: %d %q", key, resp.StatusCode, b))
				}
				mu.Unlock()
			}
		})
	}
	// each reload once 30 more deliveries were answered: requests of the
	// old configuration are running in each
	for i := range reloads {
		want := answeredN.Load() + 30
		testkit.Eventually(t, 60*time.Second, "30 more deliveries answered", func() bool { return answeredN.Load() >= want })
		if err := c.Reload(site(paths[(i+1)%2])); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
	}
	want := answeredN.Load() + 30
	testkit.Eventually(t, 60*time.Second, "30 more deliveries answered", func() bool { return answeredN.Load() >= want })
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d deliveries not answered with the application's 200, first: %s", len(failures), failures[0])
	}
	// a claim whose completion was lost ends with its lease: then its key
	// would be processed again
	time.Sleep(lease + 500*time.Millisecond)

	// where each key was recorded, read through the admin API with the
	// route on each file in turn
	in := map[string]string{}
	for _, path := range paths {
		if err := c.Reload(site(path)); err != nil {
			t.Fatal(err)
		}
		for _, key := range answered {
			var st struct {
				State string `json:"state"`
			}
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/moved/keys/"+key, &st)
			if st.State == "completed" {
				if in[key] != "" {
					t.Errorf("%s recorded in both files", key)
				}
				in[key] = path
			}
		}
	}
	// every answered key, resent to the route on its file: replayed, the
	// application never called again
	lost, again := 0, 0
	for _, path := range paths {
		if err := c.Reload(site(path)); err != nil {
			t.Fatal(err)
		}
		for _, key := range answered {
			if in[key] != path && (in[key] != "" || path != paths[0]) {
				continue
			}
			if in[key] == "" {
				lost++
			}
			resp, _ := testkit.Post(t, url, []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key)
			mu.Lock()
			n := calls[key]
			mu.Unlock()
			if resp.Header.Get(testkit.ReplayedHeader) != "true" || n != 1 {
				again++
				if again <= 5 {
					t.Errorf("%s, answered 2xx, resent: status %d, replayed %q, the application called %d times", key, resp.StatusCode, resp.Header.Get(testkit.ReplayedHeader), n)
				}
			}
		}
	}
	logs, _ := os.ReadFile(logPath)
	closed := strings.Count(string(logs), "is closed") + strings.Count(string(logs), "not on disk within")
	t.Logf("%d reloads between two files, %d deliveries answered 2xx: %d in the first file, %d in the second; %d recorded in neither, %d executed again when resent; %d log lines of a closed file",
		reloads, len(answered), count(in, paths[0]), count(in, paths[1]), lost, again, closed)
	if lost > 0 || again > 0 || closed > 0 {
		t.Fatalf("%d answered deliveries lost their record, %d ran again, %d log lines of a closed file", lost, again, closed)
	}
}

func count(m map[string]string, v string) int {
	n := 0
	for _, x := range m {
		if x == v {
			n++
		}
	}
	return n
}
