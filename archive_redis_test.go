//go:build porting

package webhookidempotency

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
)

// redisUsedMemory returns INFO memory's used_memory of the server.
func redisUsedMemory(t *testing.T, srv *redisServer) int64 {
	t.Helper()
	info := srv.client(t).Info(t.Context(), "memory").Val()
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in %q", info)
	return 0
}

// TestArchiveRedisTrimming: an archive of max_events 1000 takes ten
// thousand appends through the store's own path, then a million more of
// the same commands run inside Redis (so that the test takes seconds, not
// minutes: the network and the client are not what is measured), and
// holds about 1000 events, with Redis's memory where it was after the
// first ten thousand; once every event is older than retention, the next
// append trims them away.
func TestArchiveRedisTrimming(t *testing.T) {
	srv := startRedis(t)
	h := newRedisTestHandler(t, fmt.Sprintf(`{"source":"trim","store":{"module":"redis","addresses":[%q],"timeout":5000000000},
		"archive":{"retention":3600000000000,"max_events":1000}}`, srv.addr()))
	a := h.archive
	b := a.backend.(*redisArchive)
	entry := &archiveEntry{
		received: time.Now(), source: "trim", key: "evt", result: resultNew, status: 200,
		method: "POST", uri: "/hook", headers: "Content-Type: application/json\r\n",
		body: []byte(strings.Repeat("x", 200)), hasBody: true,
	}
	batch := make([]*archiveEntry, 1000)
	for i := range batch {
		batch[i] = entry
	}
	for range 10 {
		if err := a.backend.appendBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	stream := "{idem:trim}:archive"
	rc := srv.client(t)
	if n := rc.XLen(t.Context(), stream).Val(); n < 1000 || n > 1100 {
		t.Fatalf("after 10,000 appends the archive holds %d events, want about 1000", n)
	}

	// the store's own append commands, run n times per call
	loop := redis.NewScript(`
local n, l1 = tonumber(ARGV[1]), tonumber(ARGV[2])
local xadd, xtrim = {unpack(ARGV, 3, 2 + l1)}, {unpack(ARGV, 3 + l1)}
for i = 1, n do
	redis.call(unpack(xadd))
	redis.call(unpack(xtrim))
end
return n`)
	call := b.appendCall(entry)
	if len(call.cmds) != 2 || call.cmds[0][0] != "XADD" || call.cmds[1][0] != "XTRIM" {
		t.Fatalf("append commands: %v", call.cmds)
	}
	args := append([]any{25_000, len(call.cmds[0])}, call.cmds[0]...)
	args = append(args, call.cmds[1]...)
	// a loaded machine may take seconds per call: no read timeout, no retry
	// (a retried call would find Redis busy with the first)
	slow := redis.NewClient(&redis.Options{Addr: srv.addr(), Protocol: 2, ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = slow.Close() })
	before := redisUsedMemory(t, srv)
	start := time.Now()
	for range 40 {
		if err := loop.Run(t.Context(), slow, []string{stream}, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	after := redisUsedMemory(t, srv)
	n := rc.XLen(t.Context(), stream).Val()
	t.Logf("1,000,000 appends in %s; used_memory %d before, %d after (%+d bytes); %d events kept", took, before, after, after-before, n)
	// trimming is by whole stream nodes of 100 entries
	if n < 1000 || n > 1100 {
		t.Fatalf("the archive holds %d events, want about 1000", n)
	}
	if after-before > 1<<20 {
		t.Fatalf("used_memory grew by %d bytes over a million appends", after-before)
	}

	// every event is older than retention: the next append trims them
	clock := useFakeClock(t)
	clock.nanos.Store(time.Now().Add(2 * time.Hour).UnixNano())
	if err := a.backend.appendBatch(context.Background(), batch[:1]); err != nil {
		t.Fatal(err)
	}
	if n := rc.XLen(t.Context(), stream).Val(); n > 100 {
		t.Fatalf("after retention the archive holds %d events", n)
	}
}

// TestArchiveRedisCluster: on Redis Cluster the completion of a key and
// the append of its event go in one pipeline across two slots (the key's
// and the archive's): every new delivery is archived, and every replay.
func TestArchiveRedisCluster(t *testing.T) {
	cluster, up, url := startClusterSite(t, "arch_cluster", "archive")
	const n = 20
	for i := range n {
		key := fmt.Sprintf("evt_%d", i)
		for range 2 {
			if resp, b := post(t, url, []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %s %s", key, resp.Status, b)
			}
		}
	}
	cc := cluster.client(t)
	stream := "{idem:arch_cluster}:archive"
	var msgs []redis.XMessage
	adminWait(t, 10*time.Second, "every event archived", func() bool {
		msgs = cc.XRange(t.Context(), stream, "-", "+").Val()
		return len(msgs) >= 2*n
	})
	results := map[string]int{}
	for _, m := range msgs {
		results[str(m.Values["result"])]++
	}
	if len(msgs) != 2*n || results[resultNew] != n || results[resultReplayed] != n {
		t.Fatalf("archived %d events: %v", len(msgs), results)
	}
	if up.calls.Load() != n {
		t.Fatalf("upstream called %d times, want %d", up.calls.Load(), n)
	}
}

// TestArchiveRedisReloads: reloads under traffic keep the archive and
// leave no goroutine behind (each configuration's queue stops with it).
func TestArchiveRedisReloads(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	site := func(ttl string) string {
		return reloadSite(port, "arch_reload", "store redis redis://"+srv.addr()+"\n\t\tarchive", ttl, up.addr())
	}
	url := siteURL(port) + "/hook"
	before := settledGoroutines(up, 0, 500*time.Millisecond)
	c := startCaddy(t, "", site("1h"))
	sent := 0
	for i := range 6 {
		for j := range 5 {
			key := fmt.Sprintf("evt_%d_%d", i, j)
			for range 2 { // new, then a replay through the queue
				if resp, b := postAfterReload(t, url, []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: %s %s", key, resp.Status, b)
				}
				sent++
			}
		}
		if err := c.reload(site(fmt.Sprintf("%dh", i+2))); err != nil {
			t.Fatal(err)
		}
	}
	rc := srv.client(t)
	adminWait(t, 10*time.Second, "every event archived", func() bool {
		return rc.XLen(t.Context(), "{idem:arch_reload}:archive").Val() == int64(sent)
	})
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	const slack = 8
	if after := settledGoroutines(up, before+slack, 10*time.Second); after > before+slack {
		t.Fatalf("goroutines grew from %d to %d over 6 reloads with an archive", before, after)
	}
}
