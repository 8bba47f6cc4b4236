package restart

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// What the file store keeps in memory is bounded in bytes as well as in
// records (docs/stores.md): large recorded answers are replayed from the
// file, not held.

// procStatus returns the fields of /proc/<pid>/status in kB (VmRSS,
// RssAnon, RssFile, …).
func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			out[name], _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	return out
}

// largeAnswer is the application's answer for key: about 900 KB, its own.
func largeAnswer(key string) []byte {
	const size = 900_000
	return bytes.Repeat([]byte(key+"."), size/(len(key)+1)+1)[:size]
}

// TestLargeAnswersKeepMemoryBounded: 1,500 deliveries whose application
// answers 900 KB each. The record cache held every one (65,536 records,
// no bound in bytes): Caddy went from 60 MB to 2.7 GB resident. It now
// stays within a few hundred MB, and every key still replays its whole
// answer, read from the file.
func TestLargeAnswersKeepMemoryBounded(t *testing.T) {
	deliveries, workers := 1500, 4
	if testkit.RaceEnabled {
		// 3,000 answers of 900 KB take about seven minutes with the
		// race detector, which multiplies what Caddy's heap costs:
		// 150 of them still fail the bound below without the cache's
		// bound in bytes
		deliveries = 150
	}
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		_, _ = w.Write(largeAnswer(r.Header.Get("Idempotency-Key")))
	})
	data := t.TempDir()
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	p := startCaddyProcess(t, data, fmt.Sprintf(`:%d {
	webhook_idempotency {
		source large
	}
	reverse_proxy %s
}`, port, up.Addr()), testkit.SiteURL(port)+"/")
	pid := p.cmd.Process.Pid
	before := procStatus(t, pid)
	calls := up.Calls.Load() // the readiness probe's

	key := func(i int) string { return fmt.Sprint("large-", i) }
	post := func(i int) (*http.Response, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
		req.Header.Set("Idempotency-Key", key(i))
		resp, err := testkit.Client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	// run calls fn for every delivery from workers goroutines, and returns
	// the first failure
	run := func(fn func(i int) error) error {
		var mu sync.Mutex
		var first error
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					if err := fn(i); err != nil {
						mu.Lock()
						first = cmpOr(first, err)
						mu.Unlock()
					}
				}
			})
		}
		for i := range deliveries {
			next <- i
		}
		close(next)
		wg.Wait()
		return first
	}
	peak := int64(0)
	var peakMu sync.Mutex
	if err := run(func(i int) error {
		resp, b, err := post(i)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" || !bytes.Equal(b, largeAnswer(key(i))) {
			return fmt.Errorf("delivery %d: %d, replayed %q, %d bytes", i, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), len(b))
		}
		if i%100 == 0 {
			rss := procStatus(t, pid)["VmRSS"]
			peakMu.Lock()
			peak = max(peak, rss)
			peakMu.Unlock()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	after := procStatus(t, pid)
	peak = max(peak, after["VmRSS"])
	t.Logf("Caddy's memory, kB: before %d resident (%d anonymous); after %d deliveries of 900 KB answers %d resident (%d anonymous, %d of the file's pages); peak %d",
		before["VmRSS"], before["RssAnon"], deliveries, after["VmRSS"], after["RssAnon"], after["RssFile"], peak)

	// every key replays its whole answer, and the application saw each once
	if err := run(func(i int) error {
		resp, b, err := post(i)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b, largeAnswer(key(i))) {
			sum := sha256.Sum256(b)
			return fmt.Errorf("duplicate of delivery %d: %d, replayed %q, %d bytes (sha256 %x)", i, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), len(b), sum[:6])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	up.WantCalls(t, calls+int64(deliveries))
	replayed := procStatus(t, pid)
	t.Logf("after replaying every key, kB: %d resident (%d anonymous, %d of the file's pages)", replayed["VmRSS"], replayed["RssAnon"], replayed["RssFile"])

	// 1.3 GB of answers (135 MB with the race detector) are on disk, and
	// about 10% of them stay resident; before the cache was bounded in
	// bytes the process held every one (2.7 GB resident after the
	// deliveries; 2 GB for 300 deliveries with the race detector)
	const bound = 512 << 10 // kB
	for what, kB := range map[string]int64{"after the deliveries": after["VmRSS"], "at the peak": peak, "after the replays": replayed["VmRSS"]} {
		if kB > bound {
			t.Errorf("%s Caddy is %d MB resident for %d answers of 900 KB (bound %d MB)", what, kB>>10, deliveries, bound>>10)
		}
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
