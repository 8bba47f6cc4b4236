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

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive and the admin API on Redis under pressure: a Redis with a
// maxmemory, a Redis that stalls, a Redis that is gone; the archive on
// Redis Cluster and across reloads. What an event holds is tested in e2e,
// trimming in internal/archive.

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
// 2.5 s stall of a Redis whose store times out after 1 s are answered once
// Redis is back, not refused with an i/o timeout. (The store's timeout is
// what the requests before the stall take on a loaded machine; the stall
// ends well within the admin reads' 5 s.)
func TestArchiveAdminReadsOutlastTheStoreTimeout(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source stall
		store redis redis://%s {
			timeout 1s
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
		resumed := time.AfterFunc(2500*time.Millisecond, srv.Resume)
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
	// sources of the run's own: their counts are the process's, and a
	// run under -count would find the last one's
	memSource, redisSource := fmt.Sprintf("list_mem_%d", time.Now().UnixNano()), fmt.Sprintf("list_redis_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	handle /mem {
		webhook_idempotency {
			source %s
			store memory
			archive
		}
		reverse_proxy %s
	}
	handle /red {
		webhook_idempotency {
			source %s
			store redis redis://%s {
				timeout 5s
			}
			archive
			inbox %s/inbox
		}
	}
}`, port, memSource, up.Addr(), redisSource, srv.Addr(), up.URL))
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
	mem, red := bySource[memSource], bySource[redisSource]
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
	if resp, b := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"+redisSource), nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("one source with Redis down: %s %s", resp.Status, b)
	}
}

// TestArchiveStoreDownNeverFailsTheAnswer: with Redis down, a delivery
// that fails open is answered by the upstream as ever; its event cannot be
// appended, which is counted, and nothing else happens.
func TestArchiveStoreDownNeverFailsTheAnswer(t *testing.T) {
	const source = "arch_down"
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s {
			timeout 200ms
		}
		archive
	}
	reverse_proxy %s
}`, port, source, srv.Addr(), up.Addr()))
	before := c.Metrics(t)
	srv.Kill()
	for i := range 3 {
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte("down"), "Idempotency-Key", fmt.Sprint("down-", i))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"call"`) {
			t.Fatalf("delivery %d with Redis down: %s %s", i, resp.Status, b)
		}
	}
	if n := up.Calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times, want 3", n)
	}
	const errorsName = "caddy_webhook_idempotency_archive_errors_total"
	b, _ := before.Value(errorsName, "source", source)
	testkit.Eventually(t, 10*time.Second, "the failed appends to be counted", func() bool {
		a, _ := c.Metrics(t).Value(errorsName, "source", source)
		return a-b == 3
	})
	// counters live as long as the process: count from before
	const requestsName = "caddy_webhook_idempotency_requests_total"
	was, _ := before.Value(requestsName, "source", source, "result", "bypassed")
	if v, _ := c.Metrics(t).Value(requestsName, "source", source, "result", "bypassed"); v-was != 3 {
		t.Fatalf("bypassed %v more, want 3", v-was)
	}
}

// TestArchiveRedisCluster: on Redis Cluster the completion of a key and
// the append of its event go in one pipeline across two slots (the key's
// and the archive's): every new delivery is archived, and every replay.
func TestArchiveRedisCluster(t *testing.T) {
	cluster := testkit.StartCluster(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source arch_cluster
		%s
		archive
	}
	reverse_proxy %s
}`, port, cluster.StoreBlock("timeout 5s"), up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	const n = 20
	for i := range n {
		key := fmt.Sprintf("evt_%d", i)
		for range 2 {
			if resp, b := testkit.Post(t, url, []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %s %s", key, resp.Status, b)
			}
		}
	}
	cc := cluster.Client(t)
	stream := "{idem:arch_cluster}:archive"
	var msgs []redis.XMessage
	testkit.Eventually(t, 10*time.Second, "every event archived", func() bool {
		msgs = cc.XRange(t.Context(), stream, "-", "+").Val()
		return len(msgs) >= 2*n
	})
	byResult := map[string]int{}
	for _, m := range msgs {
		byResult[testkit.FieldString(m.Values["result"])]++
	}
	if len(msgs) != 2*n || byResult["new"] != n || byResult["replayed"] != n {
		t.Fatalf("archived %d events: %v", len(msgs), byResult)
	}
	if up.Calls.Load() != n {
		t.Fatalf("upstream called %d times, want %d", up.Calls.Load(), n)
	}
}

// TestArchiveRedisReloads: reloads under traffic keep the archive and
// leave no goroutine behind (each configuration's queue stops with it).
func TestArchiveRedisReloads(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	site := func(ttl string) string {
		return fmt.Sprintf(`:%d {
	webhook_idempotency {
		source arch_reload
		ttl %s
		store redis redis://%s
		archive
	}
	reverse_proxy %s
}`, port, ttl, srv.Addr(), up.Addr())
	}
	url := testkit.SiteURL(port) + "/hook"
	before := testkit.SettledGoroutines(up, 0, 500*time.Millisecond)
	c := testkit.StartCaddy(t, "", site("1h"))
	sent := 0
	for i := range 6 {
		for j := range 5 {
			key := fmt.Sprintf("evt_%d_%d", i, j)
			for range 2 { // new, then a replay through the queue
				if resp, b := testkit.PostAfterReload(t, url, []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %s %s", key, resp.Status, b)
				}
				sent++
			}
		}
		if err := c.Reload(site(fmt.Sprintf("%dh", i+2))); err != nil {
			t.Fatal(err)
		}
	}
	rc := srv.Client(t)
	testkit.Eventually(t, 10*time.Second, "every event archived", func() bool {
		return rc.XLen(t.Context(), "{idem:arch_reload}:archive").Val() == int64(sent)
	})
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	const slack = 8
	if after := testkit.SettledGoroutines(up, before+slack, 10*time.Second); after > before+slack {
		t.Fatalf("goroutines grew from %d to %d over 6 reloads with an archive", before, after)
	}
}
