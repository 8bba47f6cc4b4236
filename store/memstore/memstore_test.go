package memstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The memory store's own behaviour, beyond the contract suite
// (contract_test.go): exact lease and TTL arithmetic on a fake clock, the
// record's copy, the owners kept apart, sharding, the bound and its
// evictions, the janitor's sweeps, and the table shared through the
// UsagePool across reloads.
//
// Most tests here run one after the other, as they must: the fake clock
// and memorySweepEvery are package variables, the UsagePool's table is the
// process's, and settleGoroutines counts the process's goroutines. Only a
// test that touches none of them runs in parallel (parallel tests start
// once every sequential one has finished).

// fakeClock replaces the package clock for one test. Tests that use it must
// not run in parallel, and nothing else may read `now` concurrently with
// the swap (the janitor of a table created after the swap is fine: it reads
// through the fake, which is atomic).
type fakeClock struct{ nanos atomic.Int64 }

func useFakeClock(t *testing.T) *fakeClock {
	t.Helper()
	c := &fakeClock{}
	c.nanos.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	prev := now
	now = func() time.Time { return time.Unix(0, c.nanos.Load()) }
	t.Cleanup(func() { now = prev })
	return c
}

func (c *fakeClock) advance(d time.Duration) { c.nanos.Add(int64(d)) }

// newTestTable returns a private table, destroyed when the test ends.
func newTestTable(t *testing.T) *memoryTable {
	t.Helper()
	tbl := newMemoryTable(zap.NewNop())
	t.Cleanup(func() { _ = tbl.Destruct() })
	return tbl
}

func mustClaim(t *testing.T, tbl *memoryTable, key, owner string, lease time.Duration, want store.State) store.ClaimResult {
	t.Helper()
	res := tbl.claim(key, owner, lease)
	if res.State != want {
		t.Fatalf("claim(%q, %q) = %v, want %v", key, owner, res.State, want)
	}
	return res
}

func TestMemoryClaimCompleteReplay(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "k", "a", 30*time.Second, store.StateClaimed)
	res := mustClaim(t, tbl, "k", "b", 30*time.Second, store.StateInFlight)
	if res.LeaseLeft != 30*time.Second {
		t.Fatalf("LeaseLeft = %v, want 30s", res.LeaseLeft)
	}
	if err := tbl.complete("k", "b", []byte("other"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("complete by a non-owner: %v, want ErrNotOwner", err)
	}
	if err := tbl.complete("k", "a", []byte("rec"), time.Hour); err != nil {
		t.Fatalf("complete by the owner: %v", err)
	}
	res = mustClaim(t, tbl, "k", "c", 30*time.Second, store.StateCompleted)
	if string(res.Record) != "rec" {
		t.Fatalf("record = %q, want %q", res.Record, "rec")
	}
	// a completed key is no longer owned by anyone
	if err := tbl.release("k", "a"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("release of a completed key: %v, want ErrNotOwner", err)
	}
	if err := tbl.renew("k", "a", time.Minute); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("renew of a completed key: %v, want ErrNotOwner", err)
	}
	if err := tbl.complete("k", "a", []byte("again"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("second complete: %v, want ErrNotOwner", err)
	}
	mustClaim(t, tbl, "k", "c", 30*time.Second, store.StateCompleted)
}

func TestMemoryExpiredOwnerCannotTouchTheNewClaim(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "k", "old", time.Second, store.StateClaimed)
	clock.advance(2 * time.Second) // old's lease ran out without renewal
	mustClaim(t, tbl, "k", "new", 10*time.Second, store.StateClaimed)

	if err := tbl.complete("k", "old", []byte("stale"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("complete by the expired owner: %v, want ErrNotOwner", err)
	}
	if err := tbl.release("k", "old"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("release by the expired owner: %v, want ErrNotOwner", err)
	}
	if err := tbl.renew("k", "old", time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("renew by the expired owner: %v, want ErrNotOwner", err)
	}
	res := mustClaim(t, tbl, "k", "third", time.Second, store.StateInFlight)
	if res.LeaseLeft != 10*time.Second {
		t.Fatalf("the new owner's lease was changed: LeaseLeft = %v, want 10s", res.LeaseLeft)
	}
	if err := tbl.complete("k", "new", []byte("fresh"), time.Hour); err != nil {
		t.Fatalf("complete by the new owner: %v", err)
	}
	if res := mustClaim(t, tbl, "k", "third", time.Second, store.StateCompleted); string(res.Record) != "fresh" {
		t.Fatalf("record = %q, want %q", res.Record, "fresh")
	}
}

func TestMemoryExpiredLeaseCannotComplete(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "k", "a", time.Second, store.StateClaimed)
	clock.advance(time.Second)
	if err := tbl.complete("k", "a", []byte("late"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("complete after the lease ran out: %v, want ErrNotOwner", err)
	}
	if err := tbl.renew("k", "a", time.Second); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("renew after the lease ran out: %v, want ErrNotOwner", err)
	}
	mustClaim(t, tbl, "k", "b", time.Second, store.StateClaimed)
}

func TestMemoryRenewExtendsTheLease(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "k", "a", 10*time.Second, store.StateClaimed)
	for range 5 {
		clock.advance(8 * time.Second)
		if err := tbl.renew("k", "a", 10*time.Second); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	clock.advance(8 * time.Second)
	res := mustClaim(t, tbl, "k", "b", time.Second, store.StateInFlight)
	if res.LeaseLeft != 2*time.Second {
		t.Fatalf("LeaseLeft = %v, want 2s", res.LeaseLeft)
	}
	if err := tbl.renew("k", "b", time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("renew by a non-owner: %v, want ErrNotOwner", err)
	}
	clock.advance(2 * time.Second)
	mustClaim(t, tbl, "k", "b", time.Second, store.StateClaimed)
}

func TestMemoryTTLExpiry(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "k", "a", time.Second, store.StateClaimed)
	if err := tbl.complete("k", "a", []byte("rec"), time.Hour); err != nil {
		t.Fatal(err)
	}
	// the TTL counts from completion, not from the claim, and outlives the lease
	clock.advance(time.Hour - time.Nanosecond)
	mustClaim(t, tbl, "k", "b", time.Second, store.StateCompleted)
	clock.advance(time.Nanosecond)
	mustClaim(t, tbl, "k", "b", time.Second, store.StateClaimed)
}

func TestMemoryStoredRecordIsACopyUnlessLong(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)

	// a record with room to spare, as the handler's recorder hands over,
	// is copied: the caller's buffer is not kept
	buf := append(make([]byte, 0, 256), "rec"...)
	mustClaim(t, tbl, "short", "a", time.Minute, store.StateClaimed)
	if err := tbl.complete("short", "a", buf, time.Hour); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXX")
	if res := mustClaim(t, tbl, "short", "b", time.Minute, store.StateCompleted); string(res.Record) != "rec" {
		t.Fatalf("record = %q, want %q", res.Record, "rec")
	}

	// a long record without spare room is kept as handed over, and read back whole
	long := make([]byte, packMax+1)
	for i := range long {
		long[i] = byte(i)
	}
	mustClaim(t, tbl, "long", "a", time.Minute, store.StateClaimed)
	if err := tbl.complete("long", "a", long, time.Hour); err != nil {
		t.Fatal(err)
	}
	res := mustClaim(t, tbl, "long", "b", time.Minute, store.StateCompleted)
	if string(res.Record) != string(long) {
		t.Fatalf("long record read back differs (%d bytes, want %d)", len(res.Record), len(long))
	}
}

func TestMemoryEmptyRecordIsCompleted(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)

	for _, rec := range [][]byte{{}, nil} {
		key := fmt.Sprintf("empty-%v", rec == nil)
		mustClaim(t, tbl, key, "a", time.Minute, store.StateClaimed)
		if err := tbl.complete(key, "a", rec, time.Hour); err != nil {
			t.Fatal(err)
		}
		res := mustClaim(t, tbl, key, "b", time.Minute, store.StateCompleted)
		if res.Record == nil || len(res.Record) != 0 {
			t.Fatalf("%s: record = %#v, want empty and not nil", key, res.Record)
		}
		// completed: nobody owns it any more
		for _, owner := range []string{"a", ""} {
			if err := tbl.renew(key, owner, time.Minute); !errors.Is(err, store.ErrNotOwner) {
				t.Fatalf("%s: renew by %q: %v, want ErrNotOwner", key, owner, err)
			}
			if err := tbl.release(key, owner); !errors.Is(err, store.ErrNotOwner) {
				t.Fatalf("%s: release by %q: %v, want ErrNotOwner", key, owner, err)
			}
		}
	}
}

// ownersLen returns how many in-flight owners tbl holds.
func ownersLen(tbl *memoryTable) int {
	return tbl.sumShards(func(s *memoryShard) int { return len(s.owners) })
}

func TestMemoryOwnersAreDroppedWithTheirClaim(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)

	mustClaim(t, tbl, "completed", "a", time.Minute, store.StateClaimed)
	mustClaim(t, tbl, "released", "a", time.Minute, store.StateClaimed)
	mustClaim(t, tbl, "expired", "a", time.Minute, store.StateClaimed)
	mustClaim(t, tbl, "reclaimed", "a", time.Minute, store.StateClaimed)
	if n := ownersLen(tbl); n != 4 {
		t.Fatalf("%d owners, want 4", n)
	}
	if err := tbl.complete("completed", "a", []byte("rec"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := tbl.release("released", "a"); err != nil {
		t.Fatal(err)
	}
	if n := ownersLen(tbl); n != 2 {
		t.Fatalf("%d owners after complete and release, want 2", n)
	}
	clock.advance(time.Minute)
	mustClaim(t, tbl, "reclaimed", "b", time.Minute, store.StateClaimed)
	if err := tbl.complete("reclaimed", "a", []byte("stale"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("complete by the expired owner: %v, want ErrNotOwner", err)
	}
	for i := range tbl.shards {
		tbl.sweep(&tbl.shards[i])
	}
	if n := ownersLen(tbl); n != 1 {
		t.Fatalf("%d owners after the sweep, want 1 (reclaimed's new owner)", n)
	}
	if err := tbl.complete("reclaimed", "b", []byte("rec"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, keys := ownersLen(tbl), tbl.len(); n != 0 || keys != 2 {
		t.Fatalf("%d owners and %d keys, want 0 and 2", n, keys)
	}
}

func TestMemorySweepLetsClaimsInBetweenBatches(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(1 << 20)

	// one shard with many batches' worth of expired and live keys, and
	// keys claimed on it while it is swept
	const n = 6 * memorySweepBatch
	keys := sameShardKeys(tbl, "sweep-", 3*n)
	expired, live, added := keys[:n], keys[n:2*n], keys[2*n:]
	for _, k := range expired {
		mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
	}
	clock.advance(time.Minute)
	for _, k := range live {
		mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
		if err := tbl.complete(k, "a", []byte("rec"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	s := tbl.shard(keys[0])
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, k := range added {
			if res := tbl.claim(k, "b", time.Minute); res.State != store.StateClaimed {
				t.Errorf("claim(%q) during the sweep = %v, want claimed", k, res.State)
			}
		}
	}()
	tbl.sweep(s)
	<-done

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range expired {
		if _, ok := s.m[k]; ok {
			t.Fatalf("expired key %s survived the sweep", k)
		}
	}
	if len(s.owners) != len(added) {
		t.Fatalf("%d owners, want %d (the keys claimed during the sweep)", len(s.owners), len(added))
	}
	for _, k := range append(live, added...) {
		if _, ok := s.m[k]; !ok {
			t.Fatalf("live key %s was removed", k)
		}
	}
}

// sameShardKeys returns n keys that land in one shard of tbl.
func sameShardKeys(tbl *memoryTable, prefix string, n int) []string {
	var keys []string
	want := tbl.shard(prefix + "0")
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if tbl.shard(k) == want {
			keys = append(keys, k)
		}
	}
	return keys
}

func shardLen(tbl *memoryTable, key string) int {
	s := tbl.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func TestMemoryBoundedEvictsCompletedClosestToExpiry(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(2)

	keys := sameShardKeys(tbl, "bounded-", 3)
	mustClaim(t, tbl, keys[0], "a", time.Minute, store.StateClaimed)
	if err := tbl.complete(keys[0], "a", []byte("r0"), time.Hour); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, tbl, keys[1], "a", time.Minute, store.StateClaimed)
	if err := tbl.complete(keys[1], "a", []byte("r1"), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, tbl, keys[2], "a", time.Minute, store.StateClaimed)

	if n := shardLen(tbl, keys[0]); n != 2 {
		t.Fatalf("shard holds %d keys, want 2", n)
	}
	mustClaim(t, tbl, keys[1], "b", time.Minute, store.StateCompleted) // kept
	mustClaim(t, tbl, keys[2], "b", time.Minute, store.StateInFlight)
	mustClaim(t, tbl, keys[0], "b", time.Minute, store.StateClaimed) // evicted: closest to expiry
}

func TestMemoryBoundedNeverEvictsInFlight(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(2)

	keys := sameShardKeys(tbl, "inflight-", 3)
	for _, k := range keys {
		mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
	}
	// a full table of in-flight keys grows rather than drop a claim
	for _, k := range keys {
		mustClaim(t, tbl, k, "b", time.Minute, store.StateInFlight)
	}
}

func TestMemoryBoundedFindsCompletedAmongManyInFlight(t *testing.T) {
	useFakeClock(t)
	const bound = 64
	// Each round fills the table, in one shard, with in-flight keys and a
	// single completed key; the next claim must evict the completed one
	// wherever it sits, not only when a random sample happens to include it.
	for round := range 20 {
		tbl := newTestTable(t)
		tbl.setMaxEntries(bound)
		keys := sameShardKeys(tbl, fmt.Sprintf("many-%d-", round), bound+1)
		for _, k := range keys[:bound-1] {
			mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
		}
		done := keys[bound-1]
		mustClaim(t, tbl, done, "a", time.Minute, store.StateClaimed)
		if err := tbl.complete(done, "a", []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, tbl, keys[bound], "a", time.Minute, store.StateClaimed)
		if n := shardLen(tbl, done); n != bound {
			t.Fatalf("round %d: shard holds %d keys, want %d (the completed key evicted)", round, n, bound)
		}
		for _, k := range keys[:bound-1] {
			mustClaim(t, tbl, k, "b", time.Minute, store.StateInFlight)
		}
	}
}

// The bound is the table's: a full table whose new key lands in a shard of
// in-flight keys only evicts a completed key of another shard.
func TestMemoryBoundEvictsFromAnotherShard(t *testing.T) {
	useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(2)
	inflight := sameShardKeys(tbl, "busy-", 2)
	done := "done-0"
	for i := 1; tbl.shard(done) == tbl.shard(inflight[0]); i++ {
		done = fmt.Sprintf("done-%d", i)
	}
	mustClaim(t, tbl, done, "a", time.Minute, store.StateClaimed)
	if err := tbl.complete(done, "a", []byte("r"), time.Hour); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, tbl, inflight[0], "a", time.Minute, store.StateClaimed)
	mustClaim(t, tbl, inflight[1], "a", time.Minute, store.StateClaimed) // over the bound
	if n := tbl.len(); n != 2 {
		t.Fatalf("table holds %d keys, want 2", n)
	}
	mustClaim(t, tbl, inflight[0], "b", time.Minute, store.StateInFlight)
	mustClaim(t, tbl, inflight[1], "b", time.Minute, store.StateInFlight)
	mustClaim(t, tbl, done, "b", time.Minute, store.StateClaimed) // it was evicted
}

// The table's count of keys follows every way a key comes and goes, and a
// lowered bound is reached as new keys arrive.
func TestMemoryCountFollowsKeysAndLoweredBound(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(1000)
	wantCount := func(when string) {
		t.Helper()
		if c, n := tbl.count.Load(), tbl.len(); c != int64(n) {
			t.Fatalf("%s: count %d, table holds %d keys", when, c, n)
		}
	}
	for i := range 300 {
		k := fmt.Sprintf("count-%d", i)
		mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
		switch i % 3 {
		case 0:
			if err := tbl.complete(k, "a", []byte("r"), time.Hour); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := tbl.release(k, "a"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantCount("after claims, completions and releases")
	clock.advance(2 * time.Minute) // the claims left in flight expire
	mustClaim(t, tbl, "count-2", "b", time.Minute, store.StateClaimed)
	for i := range tbl.shards {
		tbl.sweep(&tbl.shards[i])
	}
	wantCount("after the sweep")
	if n := tbl.len(); n != 101 {
		t.Fatalf("table holds %d keys, want 101", n)
	}

	tbl.setMaxEntries(50)
	for i := range 60 {
		k := fmt.Sprintf("lowered-%d", i)
		mustClaim(t, tbl, k, "a", time.Minute, store.StateClaimed)
		if err := tbl.complete(k, "a", []byte("r"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	wantCount("after lowering the bound")
	if n := tbl.len(); n > 50 {
		t.Fatalf("table holds %d keys 60 claims after its bound was lowered to 50", n)
	}
}

func TestMemoryBoundedDropsExpiredFirst(t *testing.T) {
	clock := useFakeClock(t)
	tbl := newTestTable(t)
	tbl.setMaxEntries(2)

	keys := sameShardKeys(tbl, "expired-", 3)
	mustClaim(t, tbl, keys[0], "a", time.Second, store.StateClaimed) // will die
	mustClaim(t, tbl, keys[1], "a", time.Minute, store.StateClaimed)
	if err := tbl.complete(keys[1], "a", []byte("r1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * time.Second)
	mustClaim(t, tbl, keys[2], "a", time.Minute, store.StateClaimed)
	mustClaim(t, tbl, keys[1], "b", time.Minute, store.StateCompleted)
	if n := shardLen(tbl, keys[0]); n != 2 {
		t.Fatalf("shard holds %d keys, want 2", n)
	}
}

// settleGoroutines waits until the goroutine count is at most want.
func settleGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), want, buf[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMemoryJanitorSweepsAndStops(t *testing.T) {
	clock := useFakeClock(t)
	prevEvery := memorySweepEvery
	memorySweepEvery = 64 * time.Millisecond // one shard a millisecond
	t.Cleanup(func() { memorySweepEvery = prevEvery })

	before := runtime.NumGoroutine()
	tbl := newMemoryTable(zap.NewNop())
	for i := range 200 {
		k := fmt.Sprintf("sweep-%d", i)
		mustClaim(t, tbl, k, "a", time.Second, store.StateClaimed)
		if i%2 == 0 {
			if err := tbl.complete(k, "a", []byte("r"), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustClaim(t, tbl, "sweep-live", "a", time.Hour, store.StateClaimed)
	if n := tbl.len(); n != 201 {
		t.Fatalf("len = %d, want 201", n)
	}
	clock.advance(2 * time.Minute)

	deadline := time.Now().Add(10 * time.Second)
	for tbl.len() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("janitor left %d keys, want 1", tbl.len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	mustClaim(t, tbl, "sweep-live", "b", time.Hour, store.StateInFlight)

	if err := tbl.Destruct(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tbl.done:
	default:
		t.Fatal("janitor still running after Destruct")
	}
	settleGoroutines(t, before)
}

func TestMemoryDestructWithoutUse(t *testing.T) {
	before := runtime.NumGoroutine()
	tbl := newMemoryTable(zap.NewNop())
	done := make(chan struct{})
	go func() { _ = tbl.Destruct(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Destruct of a table whose janitor never started hangs")
	}
	settleGoroutines(t, before)
}

func provisionMemoryStore(t *testing.T, ctx caddy.Context) *Store {
	t.Helper()
	m := new(Store)
	if err := m.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMemoryUsagePoolSharesTheTable(t *testing.T) {
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	before := runtime.NumGoroutine()

	a := provisionMemoryStore(t, ctx)
	b := provisionMemoryStore(t, ctx)
	if a.table != b.table {
		t.Fatal("two memory stores got different tables")
	}
	bg := context.Background()
	if res, err := a.Claim(bg, "shared", "a", time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim through a: %v, %v", res.State, err)
	}
	if err := a.Complete(bg, "shared", "a", []byte("rec"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, _ := b.Claim(bg, "shared", "b", time.Minute); res.State != store.StateCompleted || string(res.Record) != "rec" {
		t.Fatalf("claim through b: %v %q, want the record written through a", res.State, res.Record)
	}

	// a reload: the new configuration provisions before the old one is
	// cleaned up, so the records survive
	if err := a.Cleanup(); err != nil {
		t.Fatal(err)
	}
	c := provisionMemoryStore(t, ctx)
	if c.table != b.table {
		t.Fatal("a store provisioned while another is alive got a new table")
	}
	if res, _ := c.Claim(bg, "shared", "c", time.Minute); res.State != store.StateCompleted {
		t.Fatalf("after cleaning up one store: %v, want the record kept", res.State)
	}
	tbl := c.table
	if err := b.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if err := c.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// the last user gone, the janitor stopped
	select {
	case <-tbl.done:
	case <-time.After(30 * time.Second):
		t.Fatal("janitor still running after the last store was cleaned up")
	}
	settleGoroutines(t, before)

	d := provisionMemoryStore(t, ctx)
	defer d.Cleanup()
	if d.table == tbl {
		t.Fatal("a destroyed table was handed out again")
	}
	if res, _ := d.Claim(bg, "shared", "d", time.Minute); res.State != store.StateClaimed {
		t.Fatalf("fresh table: %v, want Claimed", res.State)
	}
}

func TestMemoryCleanupTwiceIsSafe(t *testing.T) {
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	keep := provisionMemoryStore(t, ctx)
	defer keep.Cleanup()
	m := provisionMemoryStore(t, ctx)
	if err := m.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// a second Cleanup must not drop the other store's reference
	if err := m.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if res, _ := keep.Claim(context.Background(), "twice", "a", time.Minute); res.State != store.StateClaimed {
		t.Fatalf("claim: %v", res.State)
	}
}

func TestMemoryConcurrentClaims(t *testing.T) {
	t.Parallel() // a table of its own, on the real clock
	tbl := newTestTable(t)
	const (
		keys       = 50
		perKey     = 20
		goroutines = keys * perKey
	)
	var claimed [keys]atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			k := g % keys
			key := fmt.Sprintf("race-%d", k)
			owner := fmt.Sprintf("owner-%d", g)
			res := tbl.claim(key, owner, time.Minute)
			switch res.State {
			case store.StateClaimed:
				claimed[k].Add(1)
				// half the winners complete, the other half keep the claim
				if k%2 == 0 {
					if err := tbl.renew(key, owner, time.Minute); err != nil {
						t.Errorf("renew %s: %v", key, err)
					}
					if err := tbl.complete(key, owner, []byte(key), time.Hour); err != nil {
						t.Errorf("complete %s: %v", key, err)
					}
				}
			case store.StateInFlight:
			case store.StateCompleted:
				if string(res.Record) != key {
					t.Errorf("record of %s = %q", key, res.Record)
				}
			}
			// a loser can never touch the winner's claim
			if res.State != store.StateClaimed {
				if err := tbl.release(key, owner); !errors.Is(err, store.ErrNotOwner) {
					t.Errorf("release by a loser of %s: %v", key, err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for k := range keys {
		if n := claimed[k].Load(); n != 1 {
			t.Errorf("key %d claimed %d times, want exactly 1", k, n)
		}
	}
}

// TestMemoryRequestCompletesAfterItsConfigIsCleanedUp is a reload with a
// request in flight: Caddy cleans up the old configuration's store while the
// request it is serving still has to complete its key, and the new
// configuration must then replay that answer.
func TestMemoryRequestCompletesAfterItsConfigIsCleanedUp(t *testing.T) {
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	bg := context.Background()

	old := provisionMemoryStore(t, ctx)
	if res, err := old.Claim(bg, "inflight-reload", "first", time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v, %v", res.State, err)
	}
	// the reload: the new store is provisioned, then the old one cleaned up
	next := provisionMemoryStore(t, ctx)
	defer next.Cleanup()
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// the old configuration's request finishes now
	if err := old.Complete(bg, "inflight-reload", "first", []byte("answer"), time.Hour); err != nil {
		t.Fatalf("completing through a cleaned-up store: %v", err)
	}
	if res, _ := next.Claim(bg, "inflight-reload", "dup", time.Minute); res.State != store.StateCompleted || string(res.Record) != "answer" {
		t.Fatalf("duplicate after the reload: %v %q, want the recorded answer", res.State, res.Record)
	}
}

// len returns the number of keys held, expired ones included until swept.
func (t *memoryTable) len() int {
	return t.sumShards(func(s *memoryShard) int { return len(s.m) })
}

// sumShards adds up what of returns for each shard, read under the
// shard's lock.
func (t *memoryTable) sumShards(of func(*memoryShard) int) int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += of(s)
		s.mu.Unlock()
	}
	return n
}
