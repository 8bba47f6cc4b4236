package redise2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive and the admin API on Redis under pressure: a Redis with a
// maxmemory, a Redis that stalls, a Redis that is gone.

// Under maxmemory, the archive's growth does not cost the idempotency
// keys: with volatile-lru (every key has a TTL, the archive stream had
// none) Redis used to evict the keys and let every duplicate through; with
// noeviction, its writes were refused once the archive filled it. Now the
// archive stops appending short of maxmemory, counted as dropped, and
// every duplicate is replayed, those of the deliveries that came after
// the archive filled up included. The store warns at provision about a policy
// that evicts, and not about noeviction.
func TestArchiveLeavesRedisMemoryToKeys(t *testing.T) {
	for _, policy := range []string{"volatile-lru", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			srv := testkit.StartRedis(t, "--maxmemory", "16mb", "--maxmemory-policy", policy)
			up := testkit.NewUpstream(t, nil)
			logPath := filepath.Join(t.TempDir(), "all.log")
			port := testkit.FreePort(t)
			source := "mem_" + strings.ReplaceAll(policy, "-", "_")
			c := testkit.StartCaddy(t, fmt.Sprintf(`log everything {
		output file %s
		format json
		level INFO
	}`, logPath), fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s
		archive
	}
	reverse_proxy %s
}`, port, source, srv.Addr(), up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			// 30 MB of bodies for a Redis of 16 MB, then deliveries whose
			// keys need the room the archive would have taken
			const large, small = 300, 500
			pad := bytes.Repeat([]byte("p"), 100_000)
			delivery := func(i int) (string, []byte) {
				key := fmt.Sprintf("evt_%d", i)
				if i < large {
					return key, fmt.Appendf(nil, `{"id":%q,"pad":"%s"}`, key, pad)
				}
				return key, fmt.Appendf(nil, `{"id":%q}`, key)
			}
			for i := range large + small {
				key, body := delivery(i)
				resp, b := testkit.Post(t, url, body, "Idempotency-Key", key)
				testkit.WantNew(t, resp, b, http.StatusOK)
			}
			// every duplicate is replayed: no key was evicted or refused
			for i := range large + small {
				key, body := delivery(i)
				resp, b := testkit.Post(t, url, body, "Idempotency-Key", key)
				if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "true" {
					t.Fatalf("duplicate %s: %s replayed=%q %s", key, resp.Status, resp.Header.Get(testkit.ReplayedHeader), b)
				}
			}
			if n := up.Calls.Load(); n != large+small {
				t.Fatalf("the application ran %d deliveries for %d events", n, large+small)
			}
			m := c.Metrics(t)
			dropped, _ := m.Value("caddy_webhook_idempotency_archive_dropped_total", "source", source)
			appended, _ := m.Value("caddy_webhook_idempotency_archive_events_total", "source", source)
			t.Logf("%s: %v events archived, %v dropped", policy, appended, dropped)
			if dropped == 0 || appended == 0 {
				t.Fatalf("archive: %v appended, %v dropped; want both", appended, dropped)
			}
			waitLog(t, logPath, 10*time.Second, func(l map[string]any) bool {
				msg, _ := l["msg"].(string)
				return l["level"] == "warn" && strings.Contains(msg, "the archive stops appending") && l["source"] == source
			})
			const evictMsg = "redis can evict idempotency keys"
			if policy == "noeviction" {
				if n := logsMatching(t, logPath, logAt("warn", evictMsg, srv.Addr())); n != 0 {
					t.Fatalf("%d eviction warnings for noeviction", n)
				}
			} else {
				waitLog(t, logPath, 10*time.Second, logAt("warn", evictMsg, srv.Addr()))
			}
		})
	}
}

// An admin read waits for Redis longer than the store's timeout, which is
// meant for the request path: a list, one event and an export during a
// 1.5 s stall of a Redis whose store times out after 300 ms are answered
// once Redis is back, not refused with an i/o timeout.
func TestArchiveAdminReadsOutlastTheStoreTimeout(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source stall
		store redis redis://%s {
			timeout 300ms
		}
		archive
	}
	reverse_proxy %s
}`, port, srv.Addr(), up.Addr()))
	resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "stall_1")
	testkit.WantNew(t, resp, b, http.StatusOK)
	var list struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/stall/events", &list)
	if len(list.Events) != 1 {
		t.Fatalf("%d events", len(list.Events))
	}
	for _, path := range []string{"/events", "/events/" + list.Events[0].ID, "/events/export"} {
		srv.Pause()
		resumed := time.AfterFunc(1500*time.Millisecond, srv.Resume)
		resp, b := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/stall"+path), nil)
		resumed.Stop()
		srv.Resume()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "stall_1") {
			t.Fatalf("GET %s during a stall: %s %s", path, resp.Status, b)
		}
	}
}

// One Redis outage no longer blanks the list of sources: every source is
// listed, those whose store answers with their counts, the others marked
// unavailable with the reason; one source asked alone is still a 503.
func TestAdminSourceListSurvivesARedisOutage(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	handle /mem {
		webhook_idempotency {
			source list_mem
			store memory
			archive
		}
		reverse_proxy %s
	}
	handle /red {
		webhook_idempotency {
			source list_redis
			store redis redis://%s {
				timeout 300ms
			}
			archive
			inbox %s/inbox
		}
	}
}`, port, up.Addr(), srv.Addr(), up.URL))
	site := testkit.SiteURL(port)
	resp, b := testkit.Post(t, site+"/mem", []byte(`{"n":1}`), "Idempotency-Key", "m1")
	testkit.WantNew(t, resp, b, http.StatusOK)
	resp, b = testkit.Post(t, site+"/red", []byte(`{"n":1}`), "Idempotency-Key", "r1")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inbox: %s %s", resp.Status, b)
	}
	srv.Kill()

	resp, b = testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the list with Redis down: %s %s", resp.Status, b)
	}
	var sources []map[string]any
	if err := json.Unmarshal(b, &sources); err != nil {
		t.Fatal(err)
	}
	bySource := map[string]map[string]any{}
	for _, s := range sources {
		bySource[s["source"].(string)] = s
	}
	mem, red := bySource["list_mem"], bySource["list_redis"]
	if mem == nil || red == nil {
		t.Fatalf("sources listed: %s", b)
	}
	if _, down := mem["unavailable"]; down || mem["archive"].(map[string]any)["events"] != float64(1) {
		t.Fatalf("the memory source: %v", mem)
	}
	reason, _ := red["unavailable"].(string)
	if reason == "" || red["inbox"] != true || red["results"].(map[string]any)["new"] != float64(1) {
		t.Fatalf("the redis source: %v", red)
	}
	if _, ok := red["archive"].(map[string]any)["events"]; ok {
		t.Fatalf("the redis source shows an archive size it could not read: %v", red)
	}
	if resp, b := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/list_redis"), nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("one source with Redis down: %s %s", resp.Status, b)
	}
}
