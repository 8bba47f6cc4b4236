package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// BenchBatchItems is the size of the batch BenchBatchClaim claims.
const BenchBatchItems = 100

// BenchBatchClaim is the benchmark every backend runs for its batches
// (BENCHMARKS.md): BenchBatchItems keys claimed with one ClaimBatch
// ("batch") against one Claim per key, one after another ("each"), the
// keys all new (absent: released again, untimed, after benchRound
// batches) or all seen (completed, each with its own record of a small
// JSON answer's size). One op is the whole batch. counters, when not nil, are counts
// kept outside the calls (the process's CPU time, a Redis store's round
// trips and commands), each reported per op under its name, counted over
// the timed calls only.
//
//	go test -run '^$' -bench BatchClaim -benchmem ./store/...
func BenchBatchClaim(b *testing.B, s store.Store, counters map[string]func() int64) {
	bs, ok := s.(store.BatchStore)
	if !ok {
		b.Skipf("%T takes no batches", s)
	}
	for _, seen := range []bool{false, true} {
		for _, batch := range []bool{true, false} {
			name := map[bool]string{false: "new", true: "seen"}[seen] + "/" + map[bool]string{false: "each", true: "batch"}[batch]
			b.Run(name, func(b *testing.B) {
				benchBatchClaim(b, bs, seen, batch, counters)
			})
		}
	}
}

// benchRound is how many batches of new keys a benchmark claims between
// two releases of them (untimed): the cost of stopping the timer, and of
// reading the counters, spread over that many ops.
const benchRound = 200

func benchBatchClaim(b *testing.B, s store.BatchStore, seen, batch bool, counters map[string]func() int64) {
	prefix := fmt.Sprintf("bench:batch:%d:", time.Now().UnixNano())
	sets := make([][]string, benchRound)
	if seen {
		sets = sets[:1]
	}
	for j := range sets {
		sets[j] = make([]string, BenchBatchItems)
		for i := range sets[j] {
			sets[j][i] = fmt.Sprintf("%s%d:%03d", prefix, j, i)
		}
	}
	owner := store.NewOwner()
	want := store.StateClaimed
	if seen {
		want = store.StateCompleted
		recs := make([][]byte, BenchBatchItems)
		for i, k := range sets[0] {
			recs[i] = rec(k)
		}
		if _, err := s.ClaimBatch(ctx, sets[0], owner, time.Minute, store.BatchEach); err != nil {
			b.Fatal(err)
		}
		if err := s.CompleteBatch(ctx, sets[0], owner, recs, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	claim := func(keys []string) {
		if batch {
			res, err := s.ClaimBatch(ctx, keys, owner, time.Minute, store.BatchUnlessInFlight)
			if err != nil || res.Items[0].State != want || res.Items[len(keys)-1].State != want {
				b.Fatalf("ClaimBatch: %v, first item %s, want %s", err, res.Items[0].State, want)
			}
			return
		}
		for _, k := range keys {
			res, err := s.Claim(ctx, k, owner, time.Minute)
			if err != nil || res.State != want {
				b.Fatalf("Claim: %v, %s, want %s", err, res.State, want)
			}
		}
	}
	release := func(n int) {
		for _, keys := range sets[:n] {
			if err := s.ReleaseBatch(ctx, keys, owner); err != nil {
				b.Fatal(err)
			}
		}
	}
	claim(sets[0]) // warm: scripts loaded, connections open
	if !seen {
		release(1)
	}

	// the counters are read while the timer is stopped
	names := slices.Sorted(maps.Keys(counters))
	before, counted := make([]int64, len(names)), make([]int64, len(names))
	read := func() {
		for i, name := range names {
			before[i] = counters[name]()
		}
	}
	add := func() {
		for i, name := range names {
			counted[i] += counters[name]() - before[i]
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	read()
	b.StartTimer()
	for n := range b.N {
		j := n % len(sets)
		claim(sets[j])
		if !seen && (j == len(sets)-1 || n == b.N-1) {
			b.StopTimer()
			add()
			release(j + 1)
			read()
			b.StartTimer()
		}
	}
	b.StopTimer()
	if seen {
		add()
	}
	for i, name := range names {
		b.ReportMetric(float64(counted[i])/float64(b.N), name)
	}
}
