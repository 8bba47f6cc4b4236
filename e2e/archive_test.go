package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive as an operator reads it through the admin API, on every
// store: what a list, one event and an export read and hold, and which
// events they show.

// archivedEvent is an event as the admin API shows it.
type archivedEvent struct {
	ID           string              `json:"id"`
	Key          string              `json:"key"`
	Result       string              `json:"result"`
	BodySHA256   string              `json:"body_sha256"`
	BodyStored   bool                `json:"body_stored"`
	BodySize     *int                `json:"body_size"`
	BodyRedacted bool                `json:"body_redacted"`
	BodyOmitted  string              `json:"body_omitted"`
	URI          string              `json:"uri"`
	Headers      map[string][]string `json:"headers"`
	Body         *string             `json:"body"`
}

type archivedList struct {
	Events []archivedEvent `json:"events"`
	Cursor string          `json:"cursor"`
}

// archiveStores are the stores an archive runs on, as a route's `store`
// line.
func archiveStores(t *testing.T) map[string]string {
	srv := testkit.StartRedis(t)
	return map[string]string{
		"memory": "memory",
		"file":   "file " + filepath.Join(t.TempDir(), "store.db"),
		"redis":  "redis redis://" + srv.Addr(),
	}
}

// allocated returns what the process allocated while fn ran (Caddy runs
// in this process).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// liveHeap returns the bytes of the heap still in use, after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A list reads no body, and an export holds one body at a time: with 20
// events of 5 MB, listing one event allocates next to nothing (before,
// a list read every body of its page: 100 MB for `count=1`, and on Redis
// past the store's timeout), one event comes whole, and an export streams
// every event whole while the process holds far less than the archive.
func TestArchiveLargeBodiesAreReadOnlyWhenShown(t *testing.T) {
	const n, size = 20, 5_000_000
	pad := bytes.Repeat([]byte("x"), size-40)
	body := func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, pad) }
	for name, store := range archiveStores(t) {
		t.Run(name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			source := "large_" + name
			c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		max_body 6MB
		store %s
		archive
	}
	reverse_proxy %s
}`, port, source, store, up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			sums, sizes := map[string]string{}, map[string]int{}
			for i := range n {
				key := fmt.Sprintf("big_%d", i)
				b := body(i)
				sum := sha256.Sum256(b)
				sums[key], sizes[key] = hex.EncodeToString(sum[:]), len(b)
				resp, rb := testkit.Post(t, url, b, "Idempotency-Key", key, "Content-Type", "application/json")
				testkit.WantNew(t, resp, rb, http.StatusOK)
			}
			events := "/webhook_idempotency/" + source + "/events"
			testkit.Eventually(t, 10*time.Second, "every event archived", func() bool {
				var l archivedList
				c.AdminJSON(t, http.MethodGet, events+"?count=100", &l)
				return len(l.Events) == n
			})

			var one archivedList
			if a := allocated(func() { c.AdminJSON(t, http.MethodGet, events+"?count=1", &one) }); a > 16<<20 {
				t.Errorf("listing one event allocated %d MB", a>>20)
			}
			var all archivedList
			if a := allocated(func() { c.AdminJSON(t, http.MethodGet, events, &all) }); a > 16<<20 {
				t.Errorf("listing %d events allocated %d MB", n, a>>20)
			}
			if len(one.Events) != 1 || one.Events[0].Key != "big_19" || len(all.Events) != n {
				t.Fatalf("lists: %d events (first %+v), %d events", len(one.Events), one.Events, len(all.Events))
			}
			for _, ev := range all.Events {
				if ev.Body != nil || !ev.BodyStored || ev.BodySize == nil || *ev.BodySize != sizes[ev.Key] {
					t.Fatalf("listed event %s: stored %v, size %v, body shown %v", ev.ID, ev.BodyStored, ev.BodySize, ev.Body != nil)
				}
			}

			var whole archivedEvent
			c.AdminJSON(t, http.MethodGet, events+"/"+all.Events[7].ID, &whole)
			if whole.Body == nil || whole.Key != all.Events[7].Key || sha(*whole.Body) != sums[whole.Key] {
				t.Fatalf("one event whole: key %s, body present %v", whole.Key, whole.Body != nil)
			}

			// the export: read one line, then see what the process holds
			// while the export waits for the reader
			base := liveHeap()
			resp, err := testkit.Client.Get(c.AdminURL(events + "/export"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("export: %s %s", resp.Status, b)
			}
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			first, err := r.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the export fills what the connection holds
			held := int64(liveHeap()) - int64(base)
			t.Logf("%s: the export holds %d MB beyond the process's heap before it", name, held>>20)
			if held > 48<<20 {
				t.Errorf("while the reader waits, the export holds %d MB for an archive of %d MB", held>>20, n*size>>20)
			}
			lines := [][]byte{first}
			for {
				line, err := r.ReadBytes('\n')
				if len(line) > 0 {
					lines = append(lines, line)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(lines) != n {
				t.Fatalf("export: %d lines, want %d", len(lines), n)
			}
			for _, line := range lines {
				var ev archivedEvent
				if err := json.Unmarshal(line, &ev); err != nil {
					t.Fatalf("export line: %v", err)
				}
				if ev.Body == nil || sha(*ev.Body) != sums[ev.Key] || ev.BodySHA256 != sums[ev.Key] {
					t.Fatalf("exported %s: body present %v, sha %s", ev.Key, ev.Body != nil, ev.BodySHA256)
				}
			}
		})
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Retention holds for reads: an event older than retention is neither
// listed, fetched, exported nor counted, on every store, although no
// append has trimmed it (the source is idle).
func TestArchiveRetentionHoldsForReads(t *testing.T) {
	const retention = 4 * time.Second
	for name, store := range archiveStores(t) {
		t.Run(name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			source := "retention_" + name
			c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		store %s
		archive %s
	}
	reverse_proxy %s
}`, port, source, store, retention, up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			events := "/webhook_idempotency/" + source + "/events"
			post := func(key string) archivedEvent {
				resp, rb := testkit.Post(t, url, []byte(`{"k":"`+key+`"}`), "Idempotency-Key", key)
				testkit.WantNew(t, resp, rb, http.StatusOK)
				var l archivedList
				c.AdminJSON(t, http.MethodGet, events+"?key="+key, &l)
				if len(l.Events) != 1 {
					t.Fatalf("%s archived %d times", key, len(l.Events))
				}
				return l.Events[0]
			}
			old := post("old")
			time.Sleep(retention - time.Second)
			post("recent")
			time.Sleep(1500 * time.Millisecond) // old is past retention, recent is not, and nothing is appended

			var l archivedList
			c.AdminJSON(t, http.MethodGet, events, &l)
			if len(l.Events) != 1 || l.Events[0].Key != "recent" {
				t.Fatalf("listed past retention: %+v", l.Events)
			}
			if resp, b := testkit.Do(t, http.MethodGet, c.AdminURL(events+"/"+old.ID), nil); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("an event past retention fetched: %s %s", resp.Status, b)
			}
			resp, b := testkit.Do(t, http.MethodGet, c.AdminURL(events+"/export"), nil)
			if resp.StatusCode != http.StatusOK || strings.Count(string(b), "\n") != 1 || strings.Contains(string(b), `"key":"old"`) {
				t.Fatalf("export: %s %s", resp.Status, b)
			}
			var st struct {
				Archive struct {
					Events *int64 `json:"events"`
				} `json:"archive"`
			}
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
			if st.Archive.Events == nil || *st.Archive.Events != 1 {
				t.Fatalf("archive size %v, want 1", st.Archive.Events)
			}
		})
	}
}
