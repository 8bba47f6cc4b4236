package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The batch calls (store.BatchStore): the items of a request that holds
// many events, claimed, completed, released and renewed together.

func batched(t *testing.T, s store.Store) store.BatchStore {
	b, ok := s.(store.BatchStore)
	if !ok {
		t.Skipf("%T takes no batches", s)
	}
	return b
}

func (k keys) batch(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = k.key(n)
	}
	return out
}

func (k keys) numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = k.key(fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func claimBatch(t *testing.T, b store.BatchStore, keys []string, owner string, lease time.Duration, mode store.BatchMode) store.BatchResult {
	t.Helper()
	res, err := b.ClaimBatch(ctx, keys, owner, lease, mode)
	if err != nil {
		t.Fatalf("ClaimBatch of %d keys: %v", len(keys), err)
	}
	if len(res.Items) != len(keys) {
		t.Fatalf("ClaimBatch of %d keys: %d items", len(keys), len(res.Items))
	}
	return res
}

// wantItems checks each item's state and the result's counts.
func wantItems(t *testing.T, what string, res store.BatchResult, want ...store.State) {
	t.Helper()
	var got []store.State
	counts := map[store.State]int{}
	for _, it := range res.Items {
		got = append(got, it.State)
	}
	for _, s := range want {
		counts[s]++
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: states %v, want %v", what, got, want)
	}
	if res.Claimed != counts[store.StateClaimed] || res.InFlight != counts[store.StateInFlight] ||
		res.Completed != counts[store.StateCompleted] || res.Absent != counts[store.StateAbsent] {
		t.Fatalf("%s: counted %d claimed, %d in flight, %d completed, %d absent; want %v",
			what, res.Claimed, res.InFlight, res.Completed, res.Absent, counts)
	}
}

// every returns n times state.
func every(n int, state store.State) []store.State {
	return slices.Repeat([]store.State{state}, n)
}

func wantRecord(t *testing.T, what string, res store.ClaimResult, want []byte) {
	t.Helper()
	if !bytes.Equal(res.Record, want) {
		t.Fatalf("%s: record %q, want %q", what, res.Record, want)
	}
}

func wantNotOwnerAt(t *testing.T, what string, err error, index ...int) {
	t.Helper()
	var e *store.NotOwnerError
	if !errors.As(err, &e) || !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("%s: got %v, want a *store.NotOwnerError", what, err)
	}
	if !slices.Equal(e.Index, index) {
		t.Fatalf("%s: keys %v not owned, want %v", what, e.Index, index)
	}
}

// A batch where some items are completed, some in flight and some new: by
// default an item in flight holds the whole batch back (nothing claimed);
// BatchEach claims the new items beside it. Completed items are reported
// with their records, never claimed.
func testBatchMixed(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	a, other := store.NewOwner(), store.NewOwner()
	const lease = 10 * time.Second
	ks := k.batch("done1", "busy1", "new1", "done2", "busy2", "new2")
	for _, i := range []int{0, 3} {
		wantState(t, "claim", claim(t, s, ks[i], other, lease), store.StateClaimed)
		mustNil(t, "Complete", s.Complete(ctx, ks[i], other, rec(ks[i]), time.Hour))
	}
	for _, i := range []int{1, 4} {
		wantState(t, "claim", claim(t, s, ks[i], other, lease), store.StateClaimed)
	}
	C, F, N, A := store.StateCompleted, store.StateInFlight, store.StateClaimed, store.StateAbsent

	res := claimBatch(t, b, ks, a, lease, store.BatchUnlessInFlight)
	wantItems(t, "a batch with items in flight", res, C, F, A, C, F, A)
	for _, i := range []int{0, 3} {
		wantRecord(t, "completed item", res.Items[i], rec(ks[i]))
	}
	for _, i := range []int{1, 4} {
		if left := res.Items[i].LeaseLeft; left <= 0 || left > lease {
			t.Fatalf("item in flight: lease left %s, want in (0, %s]", left, lease)
		}
	}
	// the new items were left alone
	wantItems(t, "the new items after the batch held back", claimBatch(t, b, []string{ks[2], ks[5]}, other, lease, store.BatchUnlessInFlight), N, N)
	mustNil(t, "ReleaseBatch", b.ReleaseBatch(ctx, []string{ks[2], ks[5]}, other))

	res = claimBatch(t, b, ks, a, lease, store.BatchEach)
	wantItems(t, "BatchEach with items in flight", res, C, F, N, C, F, N)
	wantState(t, "another's claim of a claimed item", claim(t, s, ks[2], other, lease), store.StateInFlight)
	wantItems(t, "the owner's claim of its own items", claimBatch(t, b, []string{ks[2], ks[5]}, a, lease, store.BatchUnlessInFlight), N, N)
	// held back, the owner's own items stay its own (completed below)
	wantItems(t, "the owner's items held back", claimBatch(t, b, []string{ks[2], ks[1], ks[5]}, a, lease, store.BatchUnlessInFlight), N, F, N)
	mustNil(t, "CompleteBatch, a record each", b.CompleteBatch(ctx, []string{ks[2], ks[5]}, a, [][]byte{rec(ks[2]), rec(ks[5])}, time.Hour))

	// the items in flight end; the batch claims them, holding back nothing
	mustNil(t, "ReleaseBatch", b.ReleaseBatch(ctx, []string{ks[1], ks[4]}, other))
	res = claimBatch(t, b, ks, a, lease, store.BatchUnlessInFlight)
	wantItems(t, "the batch once nothing is in flight", res, C, N, C, C, N, C)
	mustNil(t, "CompleteBatch, one record", b.CompleteBatch(ctx, []string{ks[1], ks[4]}, a, [][]byte{rec("one")}, time.Hour))

	res = claimBatch(t, b, ks, other, lease, store.BatchUnlessInFlight)
	wantItems(t, "the whole batch again", res, C, C, C, C, C, C)
	for i, want := range [][]byte{rec(ks[0]), rec("one"), rec(ks[2]), rec(ks[3]), rec("one"), rec(ks[5])} {
		wantRecord(t, "replayed item", res.Items[i], want)
	}
}

// Completion, release and renewal act on the keys the owner still holds
// and report the others.
func testBatchOwners(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	a, other := store.NewOwner(), store.NewOwner()
	ks := k.batch("x0", "x1", "x2")
	recs := [][]byte{rec("x0"), rec("x1"), rec("x2")}
	wantItems(t, "claim", claimBatch(t, b, ks, a, 10*time.Second, store.BatchEach), every(3, store.StateClaimed)...)

	wantNotOwnerAt(t, "CompleteBatch by another owner", b.CompleteBatch(ctx, ks, other, recs, time.Hour), 0, 1, 2)
	wantNotOwnerAt(t, "ReleaseBatch by another owner", b.ReleaseBatch(ctx, ks, other), 0, 1, 2)
	wantNotOwnerAt(t, "RenewBatch by another owner", b.RenewBatch(ctx, ks, other, time.Hour), 0, 1, 2)
	res := claimBatch(t, b, ks, other, time.Second, store.BatchEach)
	wantItems(t, "after another owner's calls", res, every(3, store.StateInFlight)...)
	if left := res.Items[0].LeaseLeft; left > 10*time.Second {
		t.Fatalf("another owner's RenewBatch extended the lease to %s", left)
	}

	mustNil(t, "RenewBatch", b.RenewBatch(ctx, ks, a, time.Hour))
	res = claimBatch(t, b, ks, other, time.Second, store.BatchEach)
	for i, it := range res.Items {
		if it.State != store.StateInFlight || it.LeaseLeft < 30*time.Minute {
			t.Fatalf("item %d after RenewBatch for 1h: %s with %s left", i, it.State, it.LeaseLeft)
		}
	}

	// one item lost (released alone): the others are completed
	mustNil(t, "Release", s.Release(ctx, ks[1], a))
	wantNotOwnerAt(t, "CompleteBatch with an item lost", b.CompleteBatch(ctx, ks, a, recs, time.Hour), 1)
	res = claimBatch(t, b, ks, other, 10*time.Second, store.BatchEach)
	wantItems(t, "after the completion", res, store.StateCompleted, store.StateClaimed, store.StateCompleted)
	wantRecord(t, "item 0", res.Items[0], recs[0])
	wantRecord(t, "item 2", res.Items[2], recs[2])

	// retried: the completed items hold exactly their records
	wantNotOwnerAt(t, "CompleteBatch retried", b.CompleteBatch(ctx, ks, a, recs, time.Hour), 1)
	wantNotOwnerAt(t, "CompleteBatch with another record", b.CompleteBatch(ctx, ks[:1], a, [][]byte{rec("other")}, time.Hour), 0)
	wantRecord(t, "item 0 after a completion with another record", claim(t, s, ks[0], other, time.Second), recs[0])

	wantNotOwnerAt(t, "ReleaseBatch of completed items", b.ReleaseBatch(ctx, ks, other), 0, 2)
	wantState(t, "the item released among completed ones", claim(t, s, ks[1], a, time.Second), store.StateClaimed)
	absent := k.batch("absent0", "absent1")
	wantNotOwnerAt(t, "RenewBatch of absent keys", b.RenewBatch(ctx, absent, a, time.Minute), 0, 1)
	wantNotOwnerAt(t, "CompleteBatch of absent keys", b.CompleteBatch(ctx, absent, a, recs[:1], time.Hour), 0, 1)
	wantItems(t, "absent keys stay absent", claimBatch(t, b, absent, other, time.Second, store.BatchEach), store.StateClaimed, store.StateClaimed)
}

// A batch's claim whose lease ended frees its items.
func testBatchLeaseExpiry(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	a, other := store.NewOwner(), store.NewOwner()
	ks := k.batch("e0", "e1")
	wantItems(t, "claim", claimBatch(t, b, ks, a, 100*time.Millisecond, store.BatchEach), store.StateClaimed, store.StateClaimed)
	var res store.BatchResult
	for range 500 {
		if res = claimBatch(t, b, ks, other, 10*time.Second, store.BatchUnlessInFlight); res.Claimed > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantItems(t, "claim after the lease", res, store.StateClaimed, store.StateClaimed)
	wantNotOwnerAt(t, "CompleteBatch by the owner whose lease ended", b.CompleteBatch(ctx, ks, a, [][]byte{rec("a")}, time.Hour), 0, 1)
	mustNil(t, "CompleteBatch by the new owner", b.CompleteBatch(ctx, ks, other, [][]byte{rec("b")}, time.Hour))
}

// batchWindows returns the overlapping batches of the concurrency tests:
// workers windows of size keys each, spread over ks so that each key is in
// several of them.
func batchWindows(ks []string, workers, size int) [][]string {
	out := make([][]string, workers)
	for w := range out {
		start := w * len(ks) / workers
		for j := range size {
			out[w] = append(out[w], ks[(start+j)%len(ks)])
		}
	}
	return out
}

// overlapping runs one goroutine per window at once, each calling batch
// with its window and a function that counts a win of one of its keys, and
// fails the test unless every key of ks was won exactly once.
func overlapping(t *testing.T, ks []string, windows [][]string, batch func(w []string, won func(key string)) error) {
	t.Helper()
	index := make(map[string]int, len(ks))
	for i, key := range ks {
		index[key] = i
	}
	wins := make([]atomic.Int32, len(ks))
	won := func(key string) { wins[index[key]].Add(1) }
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, len(windows))
	for _, w := range windows {
		wg.Go(func() {
			<-start
			if err := batch(w, won); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range wins {
		if n := wins[i].Load(); n != 1 {
			t.Fatalf("%s claimed %d times by %d overlapping batches, want once", ks[i], n, len(windows))
		}
	}
}

// Concurrent overlapping batches (BatchEach): each item is claimed by
// exactly one of them.
func testBatchConcurrent(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	ks := k.numbered("c", 240)
	overlapping(t, ks, batchWindows(ks, 32, 60), func(w []string, won func(string)) error {
		res, err := b.ClaimBatch(ctx, w, store.NewOwner(), 10*time.Second, store.BatchEach)
		if err != nil {
			return err
		}
		if res.Claimed+res.InFlight != len(w) {
			return fmt.Errorf("batch of %d new keys: %d claimed, %d in flight", len(w), res.Claimed, res.InFlight)
		}
		for i, it := range res.Items {
			if it.State == store.StateClaimed {
				won(w[i])
			}
		}
		return nil
	})
}

// Concurrent overlapping batches held back by items in flight
// (BatchUnlessInFlight), each retried until its items are all completed:
// each item is claimed exactly once, and a batch held back holds nothing.
func testBatchConcurrentHeldBack(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	ks := k.numbered("h", 120)
	overlapping(t, ks, batchWindows(ks, 16, 30), func(w []string, won func(string)) error {
		owner := store.NewOwner()
		for attempt := range 100_000 {
			res, err := b.ClaimBatch(ctx, w, owner, 10*time.Second, store.BatchUnlessInFlight)
			if err != nil {
				return err
			}
			if res.Completed == len(w) {
				return nil
			}
			if res.InFlight > 0 {
				if res.Claimed > 0 {
					return fmt.Errorf("a batch held back by %d items in flight claimed %d (attempt %d)", res.InFlight, res.Claimed, attempt)
				}
				runtime.Gosched()
				continue
			}
			var mine []string
			for i, it := range res.Items {
				if it.State == store.StateClaimed {
					mine = append(mine, w[i])
					won(w[i])
				}
			}
			if err := b.CompleteBatch(ctx, mine, owner, [][]byte{rec(owner)}, time.Hour); err != nil {
				return err
			}
		}
		return errors.New("batch not completed after 100,000 attempts")
	})
}

// The largest batch a store takes, and the batches it refuses whole: too
// many keys, a key twice, records that do not match the keys.
func testBatchBounds(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	a, other := store.NewOwner(), store.NewOwner()
	ks := k.numbered("max", store.MaxBatchKeys)
	wantItems(t, "claim of the largest batch", claimBatch(t, b, ks, a, 10*time.Second, store.BatchUnlessInFlight), every(len(ks), store.StateClaimed)...)
	mustNil(t, "CompleteBatch of the largest batch", b.CompleteBatch(ctx, ks, a, [][]byte{rec("max")}, time.Hour))
	res := claimBatch(t, b, ks, other, 10*time.Second, store.BatchUnlessInFlight)
	wantItems(t, "the largest batch again", res, every(len(ks), store.StateCompleted)...)
	wantRecord(t, "its last item", res.Items[len(ks)-1], rec("max"))

	over := k.numbered("over", store.MaxBatchKeys+1)
	if _, err := b.ClaimBatch(ctx, over, a, time.Minute, store.BatchEach); !errors.Is(err, store.ErrBatchTooLarge) {
		t.Fatalf("ClaimBatch of %d keys: %v, want store.ErrBatchTooLarge", len(over), err)
	}
	for _, op := range []error{
		b.CompleteBatch(ctx, over, a, [][]byte{rec("over")}, time.Hour),
		b.ReleaseBatch(ctx, over, a),
		b.RenewBatch(ctx, over, a, time.Minute),
	} {
		if !errors.Is(op, store.ErrBatchTooLarge) {
			t.Fatalf("a call on %d keys: %v, want store.ErrBatchTooLarge", len(over), op)
		}
	}
	twice := []string{over[0], over[1], over[0]}
	if _, err := b.ClaimBatch(ctx, twice, a, time.Minute, store.BatchEach); !errors.Is(err, store.ErrBatchDuplicate) {
		t.Fatalf("ClaimBatch with a key twice: %v, want store.ErrBatchDuplicate", err)
	}
	wantItems(t, "the keys of the refused batches", claimBatch(t, b, over[:store.MaxBatchKeys], other, time.Minute, store.BatchUnlessInFlight), every(store.MaxBatchKeys, store.StateClaimed)...)
	if err := b.CompleteBatch(ctx, over[:3], other, [][]byte{rec("1"), rec("2")}, time.Hour); !errors.Is(err, store.ErrBatchRecordCount) {
		t.Fatalf("CompleteBatch of 3 keys with 2 records: %v, want store.ErrBatchRecordCount", err)
	}
	wantItems(t, "the keys of the refused completion", claimBatch(t, b, over[:3], a, time.Minute, store.BatchEach), every(3, store.StateInFlight)...)
}

// An empty batch does nothing and fails nothing.
func testBatchEmpty(t *testing.T, s store.Store, k keys) {
	b := batched(t, s)
	a := store.NewOwner()
	res, err := b.ClaimBatch(ctx, nil, a, time.Minute, store.BatchUnlessInFlight)
	mustNil(t, "ClaimBatch of no keys", err)
	if len(res.Items) != 0 || res.Claimed+res.InFlight+res.Completed+res.Absent != 0 {
		t.Fatalf("ClaimBatch of no keys: %+v", res)
	}
	mustNil(t, "CompleteBatch of no keys", b.CompleteBatch(ctx, nil, a, nil, time.Hour))
	mustNil(t, "ReleaseBatch of no keys", b.ReleaseBatch(ctx, []string{}, a))
	mustNil(t, "RenewBatch of no keys", b.RenewBatch(ctx, nil, a, time.Minute))
}
