package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// scriptCalls returns the script calls (EVALSHA and EVAL) each client's
// server has run: the store's round trips, the commands a script runs
// being counted apart under their own names.
func scriptCalls(t testing.TB, clients ...*redis.Client) []int64 {
	t.Helper()
	out := make([]int64, len(clients))
	for i, c := range clients {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			name, rest, ok := strings.Cut(line, ":calls=")
			if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
				continue
			}
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[i] += n
		}
	}
	return out
}

// nodeClients returns a client of each master of the cluster, by address.
func nodeClients(t *testing.T, c *testkit.Cluster) (addrs []string, clients []*redis.Client) {
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
		clients = append(clients, n.Client(t))
	}
	return addrs, clients
}

// Every batch call is one script call per node that serves one of its
// keys: one on a standalone Redis, one on each master of a Cluster, for
// 100 keys as for 1,000.
func TestBatchOneScriptPerNode(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	cluster := testkit.StartCluster(t)
	_, clusterClients := nodeClients(t, cluster)
	cases := []struct {
		name    string
		addrs   []string
		clients []*redis.Client
	}{
		{"standalone", []string{srv.Addr()}, []*redis.Client{srv.Client(t)}},
		{"cluster", cluster.Addrs(), clusterClients},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addrs, _ := json.Marshal(tc.addrs)
			s := provisionRedisStore(t, fmt.Sprintf(`{"addresses":%s,"timeout":%d}`, addrs, 5*time.Second))
			ctx := context.Background()
			owner := store.NewOwner()
			// the scripts loaded on every node first (a node that does not
			// know one answers EVALSHA with NOSCRIPT, then gets EVAL)
			warm := batchKeys("warm", 60)
			if _, err := s.ClaimBatch(ctx, warm, owner, time.Minute, store.BatchEach); err != nil {
				t.Fatal(err)
			}
			if err := s.CompleteBatch(ctx, warm, owner, [][]byte{testRecord("warm")}, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := s.RenewBatch(ctx, warm, owner, time.Minute); err == nil {
				t.Fatal("RenewBatch of completed keys succeeded")
			}
			if err := s.ReleaseBatch(ctx, warm, owner); err == nil {
				t.Fatal("ReleaseBatch of completed keys succeeded")
			}
			for _, n := range []int{100, store.MaxBatchKeys} {
				keys := batchKeys(tc.name+strconv.Itoa(n), n)
				for _, step := range []struct {
					name string
					call func() error
				}{
					{"ClaimBatch", func() error {
						res, err := s.ClaimBatch(ctx, keys, owner, time.Minute, store.BatchUnlessInFlight)
						if err == nil && res.Claimed != n {
							err = fmt.Errorf("%d of %d claimed", res.Claimed, n)
						}
						return err
					}},
					{"RenewBatch", func() error { return s.RenewBatch(ctx, keys, owner, time.Minute) }},
					{"CompleteBatch", func() error { return s.CompleteBatch(ctx, keys, owner, [][]byte{testRecord("x")}, time.Minute) }},
					{"ClaimBatch of completed keys", func() error {
						res, err := s.ClaimBatch(ctx, keys, owner, time.Minute, store.BatchUnlessInFlight)
						if err == nil && res.Completed != n {
							err = fmt.Errorf("%d of %d completed", res.Completed, n)
						}
						return err
					}},
				} {
					before := scriptCalls(t, tc.clients...)
					if err := step.call(); err != nil {
						t.Fatalf("%s of %d keys: %v", step.name, n, err)
					}
					after := scriptCalls(t, tc.clients...)
					for i := range after {
						if d := after[i] - before[i]; d != 1 {
							t.Fatalf("%s of %d keys: %d script calls on node %d, want 1", step.name, n, d, i)
						}
					}
				}
			}
		})
	}
}

// batchKeys returns n store keys named after prefix.
func batchKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("idem:test:%s:%d:%d", prefix, time.Now().UnixNano(), i)
	}
	return keys
}

// On a Cluster, a batch held back by a key in flight on one master claims
// nothing on the others either: what their scripts claimed is given back
// in the same call. And a batch whose call fails on one master (hung) is
// an error that leaves nothing claimed on the masters that answered.
func TestBatchClusterClaimsNothingOrAll(t *testing.T) {
	t.Parallel()
	// full coverage off: the other masters serve while one is paused
	cluster := testkit.StartClusterWith(t, testkit.ClusterOptions{Args: []string{"--cluster-require-full-coverage", "no"}})
	// what the answering masters' calls take on a loaded machine; a call
	// to the hung one waits it out
	const timeout = 2 * time.Second
	addrs, _ := json.Marshal(cluster.Addrs())
	s := provisionRedisStore(t, fmt.Sprintf(`{"addresses":%s,"timeout":%d}`, addrs, timeout))
	ctx := context.Background()
	byMaster := keysByMaster(t, cluster, 8)
	var batch []string
	for _, n := range cluster.Nodes {
		batch = append(batch, byMaster[n.Addr()][:3]...)
	}
	other, a, third := store.NewOwner(), store.NewOwner(), store.NewOwner()
	busy := byMaster[cluster.Nodes[1].Addr()][0]
	if res, err := s.Claim(ctx, busy, other, time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim of %s: %v %v", busy, res.State, err)
	}
	res, err := s.ClaimBatch(ctx, batch, a, time.Minute, store.BatchUnlessInFlight)
	if err != nil {
		t.Fatal(err)
	}
	if res.InFlight != 1 || res.Absent != len(batch)-1 || res.Claimed != 0 {
		t.Fatalf("batch with one key in flight: %d in flight, %d absent, %d claimed", res.InFlight, res.Absent, res.Claimed)
	}
	for _, k := range batch {
		if k == busy {
			continue
		}
		if res, err := s.Claim(ctx, k, third, time.Minute); err != nil || res.State != store.StateClaimed {
			t.Fatalf("%s after the batch was held back: %v %v, want it absent", k, res.State, err)
		}
	}

	// one master hung: the others' claims go back
	var fresh []string
	for _, n := range cluster.Nodes {
		fresh = append(fresh, byMaster[n.Addr()][3:6]...)
	}
	hung := cluster.Nodes[2]
	hung.Pause()
	defer hung.Resume()
	if _, err := s.ClaimBatch(ctx, fresh, a, time.Minute, store.BatchEach); err == nil {
		t.Fatal("ClaimBatch with a master hung succeeded")
	}
	for _, k := range fresh {
		if slices.Contains(byMaster[hung.Addr()], k) {
			continue
		}
		if res, err := s.Claim(ctx, k, third, time.Minute); err != nil || res.State != store.StateClaimed {
			t.Fatalf("%s after a batch claim failed on another master: %v %v, want it absent", k, res.State, err)
		}
	}

	// the hung master's failures are its own: its breaker opens, the
	// others' stay closed though their calls shared its pipelines
	hung.Resume()
	if err := s.RenewBatch(ctx, fresh, a, time.Minute); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("RenewBatch of keys not held, every master answering: %v", err)
	}
	hung.Pause()
	for range breakerThreshold {
		if err := s.RenewBatch(ctx, fresh, a, time.Minute); err == nil || errors.Is(err, store.ErrNotOwner) {
			t.Fatalf("RenewBatch with a master hung: %v, want its failure", err)
		}
	}
	for _, n := range s.client.nodes.all() {
		if open := !n.breaker.allow(); open != (n.addr == hung.Addr()) {
			t.Fatalf("after %d batches failed on the hung master %s, the breaker of %s is open: %t", breakerThreshold, hung.Addr(), n.addr, open)
		}
	}
}

// On a Cluster each node's script takes keys of several slots, all its
// own. Should a key be another node's (a slot moved since the client read
// the slot map), the script fails before it writes anything: the keys of
// its own node are left as they were.
func TestBatchScriptsWriteNothingForAKeyElsewhere(t *testing.T) {
	t.Parallel()
	cluster := testkit.StartCluster(t)
	byMaster := keysByMaster(t, cluster, 2)
	here, there := cluster.Nodes[0], cluster.Nodes[1]
	mine, elsewhere := byMaster[here.Addr()], byMaster[there.Addr()][0]
	rc := here.Client(t)
	ctx := context.Background()
	owner := store.NewOwner()
	claimed := inFlightMarker + owner
	for _, tc := range []struct {
		name   string
		script *redis.Script
		args   []any
		before string // the keys' value before the call ("" for none)
	}{
		{"claim", redisClaimBatchScript, []any{owner, "60000", "0"}, ""},
		{"complete", redisCompleteBatchScript, []any{owner, "60000", "1", string(testRecord("x"))}, claimed},
		{"release", redisReleaseBatchScript, []any{owner}, claimed},
		{"renew", redisRenewBatchScript, []any{owner, "600000"}, claimed},
	} {
		for _, k := range mine {
			if tc.before == "" {
				rc.Del(ctx, k)
			} else {
				rc.Set(ctx, k, tc.before, time.Minute)
			}
		}
		// the second key of this node, then a key of another node
		args := append(append([]any{}, tc.args...), mine[1], elsewhere)
		err := tc.script.Run(ctx, rc, mine[:1], args...).Err()
		if err == nil || !strings.Contains(err.Error(), "non local key") {
			t.Fatalf("%s script with a key of another node: %v, want a non local key error", tc.name, err)
		}
		for _, k := range mine {
			v, err := rc.Get(ctx, k).Result()
			if err == redis.Nil {
				v = ""
			}
			ttl := rc.PTTL(ctx, k).Val()
			if v != tc.before || (tc.before != "" && ttl > time.Minute) {
				t.Fatalf("%s script with a key of another node changed %s: %q (ttl %v), was %q", tc.name, k, v, ttl, tc.before)
			}
		}
	}
}

// With `replicas … completions`, a batch's completion returns once the
// replica has every record, and still reports the keys not owned; while
// the replica does not answer, it waits replicas_timeout and is recorded
// on the master.
func TestBatchReplicatedCompletion(t *testing.T) {
	t.Parallel()
	master := testkit.StartRedis(t)
	replica := testkit.StartReplica(t, master)
	// the healthy replica's time to acknowledge on a loaded machine (the
	// first completion asserts it did); the paused one's completion waits
	// it out, and the calls outlast it
	const wait = 2 * time.Second
	s := provisionRedisStore(t, fmt.Sprintf(`{"addresses":["%s"],"replicas":1,"replicas_timeout":%d,"replicas_completions":true,"timeout":%d}`, master.Addr(), wait, 10*time.Second))
	ctx := context.Background()
	keys := batchKeys("replicated", 20)
	owner := store.NewOwner()
	if res, err := s.ClaimBatch(ctx, keys[:19], owner, time.Minute, store.BatchEach); err != nil || res.Claimed != 19 {
		t.Fatalf("claim: %d claimed, %v", res.Claimed, err)
	}
	recs := make([][]byte, len(keys))
	for i, k := range keys {
		recs[i] = testRecord(k)
	}
	var notOwned *store.NotOwnerError
	if err := s.CompleteBatch(ctx, keys, owner, recs, time.Minute); !errors.As(err, &notOwned) || !slices.Equal(notOwned.Index, []int{19}) {
		t.Fatalf("CompleteBatch with the last key never claimed: %v, want it reported alone", err)
	}
	rc := replica.Client(t)
	for i, k := range keys[:19] {
		if v := rc.Get(ctx, k).Val(); v != string(recs[i]) {
			t.Fatalf("the replica holds %q under %s right after the completion, want its record", v, k)
		}
	}

	replica.Pause()
	defer replica.Resume()
	more := batchKeys("unreplicated", 20)
	if res, err := s.ClaimBatch(ctx, more, owner, time.Minute, store.BatchEach); err != nil || res.Claimed != len(more) {
		t.Fatalf("claim: %d claimed, %v", res.Claimed, err)
	}
	start := time.Now()
	if err := s.CompleteBatch(ctx, more, owner, recs[:1], time.Minute); err != nil {
		t.Fatalf("a completion the replica did not acknowledge: %v, want it recorded on the master", err)
	}
	if d := time.Since(start); d < wait {
		t.Fatalf("the completion returned after %v, without waiting replicas_timeout (%v)", d, wait)
	}
	if res, err := s.ClaimBatch(ctx, more, store.NewOwner(), time.Minute, store.BatchEach); err != nil || res.Completed != len(more) {
		t.Fatalf("after the completion: %d completed, %v; want all on the master", res.Completed, err)
	}
}
