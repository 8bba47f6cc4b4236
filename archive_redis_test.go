package webhookidempotency

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive on the redis store, as the handler runs it in Caddy: on
// Redis Cluster, and across reloads. Trimming is tested in
// internal/archive.

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
		byResult[archiveField(m.Values["result"])]++
	}
	if len(msgs) != 2*n || byResult[results.New] != n || byResult[results.Replayed] != n {
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
