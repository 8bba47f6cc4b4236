package redise2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Keys and TTLs as docs/stores.md says, with the store set by the global option.
func TestRedisKeysAndTTLsWithGlobalOption(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	shop, wa := testkit.FreePort(t), testkit.FreePort(t)
	testkit.StartCaddy(t, fmt.Sprintf(`webhook_idempotency {
		store redis redis://%s {
			key_prefix wh
			timeout 5s
		}
	}`, srv.Addr()), fmt.Sprintf(`:%d {
	webhook_idempotency source shop ttl 2h
	reverse_proxy %s
}
:%d {
	webhook_idempotency {
		source wa
		key body
	}
	reverse_proxy %s
}`, shop, up.Addr(), wa, up.Addr()))

	long := strings.Repeat("k", 201)
	body := []byte(`{"entry":[1]}`)
	testkit.Post(t, testkit.SiteURL(shop)+"/hook", []byte(`{}`), "Idempotency-Key", "evt_1")
	testkit.Post(t, testkit.SiteURL(shop)+"/hook", []byte(`{}`), "Idempotency-Key", long)
	testkit.Post(t, testkit.SiteURL(wa)+"/hook", body)
	resp, _ := testkit.Post(t, testkit.SiteURL(wa)+"/hook", body)
	if resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatal("duplicate body on the wa site not replayed")
	}

	ctx := context.Background()
	rc := srv.Client(t)
	var keys []string
	iter := rc.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	bodySum := sha256.Sum256(body)
	longSum := sha256.Sum256([]byte(long))
	want := []string{
		"wh:shop:evt_1",
		"wh:shop:key-sha256:" + hex.EncodeToString(longSum[:]),
		"wh:wa:sha256:" + hex.EncodeToString(bodySum[:]),
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys in Redis:\n%q\nwant\n%q", keys, want)
	}
	for key, ttl := range map[string]time.Duration{want[0]: 2 * time.Hour, want[2]: 24 * time.Hour} {
		if pttl := rc.PTTL(ctx, key).Val(); pttl <= ttl-time.Minute || pttl > ttl {
			t.Errorf("PTTL of %s: %v, want about %v", key, pttl, ttl)
		}
		v, _ := rc.Get(ctx, key).Bytes()
		if rec, err := record.Decode(v); err != nil || rec.Status != http.StatusOK {
			t.Errorf("value of %s is not a 200 record: %v", key, err)
		}
	}
}

// startClusterSite starts a Redis Cluster and a Caddy in front of a fresh
// upstream whose handler for source stores on the cluster (timeout 5s) and
// has the directives extra too; it returns the cluster, the upstream and
// the handler's URL.
func startClusterSite(t *testing.T, source string, extra ...string) (*testkit.Cluster, *testkit.Upstream, string) {
	t.Helper()
	cluster := testkit.StartCluster(t)
	up := testkit.NewUpstream(t, nil)
	directive := "webhook_idempotency {\n\t\tsource " + source + "\n\t\t" + cluster.StoreBlock("timeout 5s")
	for _, d := range extra {
		directive += "\n\t\t" + d
	}
	return cluster, up, testkit.StartProxy(t, directive+"\n\t}", up) + "/hook"
}

func TestRedisClusterDeduplicates(t *testing.T) {
	cluster, up, url := startClusterSite(t, "cluster")

	const keys = 240
	var wg sync.WaitGroup
	errs := make(chan string, keys)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				key := fmt.Sprintf("evt_%d", i)
				first, firstBody := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
				second, secondBody := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
				if first.StatusCode != http.StatusOK || first.Header.Get(testkit.ReplayedHeader) != "" ||
					second.StatusCode != http.StatusOK || second.Header.Get(testkit.ReplayedHeader) != "true" ||
					string(firstBody) != string(secondBody) {
					errs <- fmt.Sprintf("%s: %d %q then %d %q", key, first.StatusCode, firstBody, second.StatusCode, secondBody)
				}
			}
		}()
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := up.Calls.Load(); got != keys {
		t.Fatalf("upstream called %d times for %d keys, want once each", got, keys)
	}

	// the keys are spread over every master (the source's counts and
	// series, {idem:cluster}:series:…, are not deliveries' keys)
	ctx := context.Background()
	total := 0
	for _, n := range cluster.Nodes {
		size := len(n.Client(t).Keys(ctx, "idem:*").Val())
		if size == 0 {
			t.Errorf("master %s holds no key", n.Addr())
		}
		total += int(size)
	}
	if total != keys {
		t.Fatalf("%d keys in the cluster, want %d", total, keys)
	}
	if v := cluster.Client(t).Get(ctx, "idem:cluster:evt_7").Val(); len(v) == 0 || v[0] != record.Version {
		t.Fatal("idem:cluster:evt_7 does not hold a record")
	}
}

func TestRedisSentinelFindsMaster(t *testing.T) {
	sentinel := testkit.StartSentinel(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source sentinel
		store redis {
			address %s
			master_name %s
			timeout 5s
		}
	}
	reverse_proxy %s
}`, port, sentinel.Node.Addr(), sentinel.MasterName, up.Addr()))

	url := testkit.SiteURL(port) + "/hook"
	first, firstBody := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_s")
	second, secondBody := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_s")
	if first.Header.Get(testkit.ReplayedHeader) != "" || second.Header.Get(testkit.ReplayedHeader) != "true" || string(firstBody) != string(secondBody) {
		t.Fatalf("through Sentinel: %d %q then %d %q", first.StatusCode, firstBody, second.StatusCode, secondBody)
	}
	if up.Calls.Load() != 1 {
		t.Fatalf("upstream called %d times, want 1", up.Calls.Load())
	}
	if n := sentinel.Master.Client(t).Exists(context.Background(), "idem:sentinel:evt_s").Val(); n != 1 {
		t.Fatal("the key is not on the master the Sentinel names")
	}
}
