// Package storetest is the contract suite of store.Store, in the spirit of
// testing/fstest.TestFS: every backend's tests run it against a real
// instance of the backend. It tests what the handler relies on: claims,
// completion, release and renewal with owners, lease and record expiry,
// concurrent claims of one key, a retried Complete, and, where the store
// has them, guards, notes, key administration and batches (batch.go).
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Run runs the contract suite. open returns a provisioned store for one
// test; stores that share state across opens (a process-wide table, one
// Redis) are fine: every test uses keys of its own.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store, k keys)
	}{
		{"ClaimCompleteReplay", testClaimCompleteReplay},
		{"ReleaseLetsTheNextClaimIn", testRelease},
		{"OtherOwnersChangeNothing", testNotOwner},
		{"RenewExtendsTheLease", testRenew},
		{"ExpiredLeaseFreesTheKey", testLeaseExpiry},
		{"CompletedKeyExpiresAfterTTL", testTTLExpiry},
		{"RetriedComplete", testRetriedComplete},
		{"ConcurrentClaimsOneWinner", testConcurrentClaims},
		{"Guard", testGuard},
		{"Note", testNote},
		{"KeyAdmin", testKeyAdmin},
		{"BatchMixed", testBatchMixed},
		{"BatchOwners", testBatchOwners},
		{"BatchLeaseExpiry", testBatchLeaseExpiry},
		{"BatchConcurrent", testBatchConcurrent},
		{"BatchConcurrentHeldBack", testBatchConcurrentHeldBack},
		{"BatchBounds", testBatchBounds},
		{"BatchEmpty", testBatchEmpty},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			tc.fn(t, s, newKeys(t))
		})
	}
}

// keys makes store keys unique to one test.
type keys struct{ prefix string }

var runs atomic.Int64

func newKeys(t *testing.T) keys {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return keys{prefix: fmt.Sprintf("storetest:%d:%d:%s:", time.Now().UnixNano(), runs.Add(1), name)}
}

func (k keys) key(name string) string { return k.prefix + name }

var ctx = context.Background()

// rec is a record the suite stores, encoded as the handler encodes its
// records (a store may check that what it holds decodes as one).
func rec(s string) []byte {
	hash := sha256.Sum256([]byte(s))
	b := record.Encode(nil, 200, http.Header{"X-Test": {s}}, &hash)
	return append(b, "body of "+s...)
}

func claim(t *testing.T, s store.Store, key, owner string, lease time.Duration) store.ClaimResult {
	t.Helper()
	res, err := s.Claim(ctx, key, owner, lease)
	if err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	return res
}

func wantState(t *testing.T, what string, res store.ClaimResult, want store.State) {
	t.Helper()
	if res.State != want {
		t.Fatalf("%s: state %s, want %s", what, res.State, want)
	}
}

func mustNil(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantNotOwner(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("%s: got %v, want store.ErrNotOwner", what, err)
	}
}

func testClaimCompleteReplay(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	lease := 10 * time.Second
	wantState(t, "first claim", claim(t, s, key, a, lease), store.StateClaimed)
	res := claim(t, s, key, b, lease)
	wantState(t, "claim while in flight", res, store.StateInFlight)
	if res.LeaseLeft <= 0 || res.LeaseLeft > lease {
		t.Fatalf("lease left %s, want in (0, %s]", res.LeaseLeft, lease)
	}
	mustNil(t, "Complete", s.Complete(ctx, key, a, rec("a"), time.Hour))
	res = claim(t, s, key, b, lease)
	wantState(t, "claim after completion", res, store.StateCompleted)
	if !bytes.Equal(res.Record, rec("a")) {
		t.Fatalf("record %q, want %q", res.Record, rec("a"))
	}
	// the owner's own second claim is a duplicate too
	wantState(t, "owner's claim after completion", claim(t, s, key, a, lease), store.StateCompleted)
}

func testRelease(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	wantState(t, "claim", claim(t, s, key, a, 10*time.Second), store.StateClaimed)
	mustNil(t, "Release", s.Release(ctx, key, a))
	wantState(t, "claim after release", claim(t, s, key, b, 10*time.Second), store.StateClaimed)
	wantNotOwner(t, "second Release by the first owner", s.Release(ctx, key, a))
	wantState(t, "the second owner keeps the key", claim(t, s, key, a, 10*time.Second), store.StateInFlight)
}

func testNotOwner(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	wantState(t, "claim", claim(t, s, key, a, 10*time.Second), store.StateClaimed)
	wantNotOwner(t, "Complete by another owner", s.Complete(ctx, key, b, rec("b"), time.Hour))
	wantNotOwner(t, "Release by another owner", s.Release(ctx, key, b))
	wantNotOwner(t, "Renew by another owner", s.Renew(ctx, key, b, time.Minute))
	wantState(t, "still in flight", claim(t, s, key, b, 10*time.Second), store.StateInFlight)
	mustNil(t, "Complete by the owner", s.Complete(ctx, key, a, rec("a"), time.Hour))
	res := claim(t, s, key, b, time.Second)
	if !bytes.Equal(res.Record, rec("a")) {
		t.Fatalf("record %q, want the owner's %q", res.Record, rec("a"))
	}
	absent := k.key("absent")
	wantNotOwner(t, "Complete of an absent key", s.Complete(ctx, absent, a, rec("a"), time.Hour))
	wantNotOwner(t, "Release of an absent key", s.Release(ctx, absent, a))
	wantNotOwner(t, "Renew of an absent key", s.Renew(ctx, absent, a, time.Minute))
	wantState(t, "the absent key stays absent", claim(t, s, absent, b, time.Second), store.StateClaimed)
}

// The lease and the record's ttl in the tests of expiry and renewal are
// long enough that the calls made before they end come in time on a loaded
// machine; the tests then sleep past the end, which a slow machine only
// makes surer.
const (
	shortLease = 2 * time.Second
	pastEnd    = 250 * time.Millisecond // slept past an expiry
)

func testRenew(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	const renewed = time.Minute
	wantState(t, "claim", claim(t, s, key, a, shortLease), store.StateClaimed)
	firstEnds := time.Now().Add(shortLease)
	renewing := time.Now()
	mustNil(t, "Renew", s.Renew(ctx, key, a, renewed))
	time.Sleep(time.Until(firstEnds.Add(pastEnd)))
	res := claim(t, s, key, b, time.Second)
	wantState(t, "claim after the first lease would have ended", res, store.StateInFlight)
	if least := renewed - time.Since(renewing) - time.Second; res.LeaseLeft < least {
		t.Fatalf("lease left %s after renewing for %s, want at least %s", res.LeaseLeft, renewed, least)
	}
}

func testLeaseExpiry(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	wantState(t, "claim", claim(t, s, key, a, 100*time.Millisecond), store.StateClaimed)
	time.Sleep(250 * time.Millisecond)
	wantState(t, "claim after the lease", claim(t, s, key, b, 10*time.Second), store.StateClaimed)
	wantNotOwner(t, "Complete by the owner whose lease ended", s.Complete(ctx, key, a, rec("a"), time.Hour))
	wantNotOwner(t, "Release by the owner whose lease ended", s.Release(ctx, key, a))
	wantNotOwner(t, "Renew by the owner whose lease ended", s.Renew(ctx, key, a, time.Minute))
	wantState(t, "the new owner keeps the key", claim(t, s, key, a, time.Second), store.StateInFlight)
	mustNil(t, "Complete by the new owner", s.Complete(ctx, key, b, rec("b"), time.Hour))
}

func testTTLExpiry(t *testing.T, s store.Store, k keys) {
	key, a, b := k.key("k"), store.NewOwner(), store.NewOwner()
	wantState(t, "claim", claim(t, s, key, a, 10*time.Second), store.StateClaimed)
	mustNil(t, "Complete", s.Complete(ctx, key, a, rec("a"), shortLease))
	expires := time.Now().Add(shortLease)
	wantState(t, "claim before the ttl", claim(t, s, key, b, time.Second), store.StateCompleted)
	time.Sleep(time.Until(expires.Add(pastEnd)))
	wantState(t, "claim after the ttl", claim(t, s, key, b, time.Second), store.StateClaimed)
}

// testRetriedComplete is the contract for a Complete called again (its
// first answer lost, say): with the record the key holds it succeeds, with
// another it is refused and the record stays.
func testRetriedComplete(t *testing.T, s store.Store, k keys) {
	key, a := k.key("k"), store.NewOwner()
	wantState(t, "claim", claim(t, s, key, a, 10*time.Second), store.StateClaimed)
	mustNil(t, "Complete", s.Complete(ctx, key, a, rec("a"), time.Hour))
	mustNil(t, "the same Complete again", s.Complete(ctx, key, a, rec("a"), time.Hour))
	wantNotOwner(t, "Complete again with another record", s.Complete(ctx, key, a, rec("other"), time.Hour))
	res := claim(t, s, key, store.NewOwner(), time.Second)
	if !bytes.Equal(res.Record, rec("a")) {
		t.Fatalf("record %q after the retries, want %q", res.Record, rec("a"))
	}
}

func testConcurrentClaims(t *testing.T, s store.Store, k keys) {
	const n = 64
	key := k.key("k")
	var claimed, inFlight atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			res, err := s.Claim(ctx, key, store.NewOwner(), 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			switch res.State {
			case store.StateClaimed:
				claimed.Add(1)
			case store.StateInFlight:
				inFlight.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Claim: %v", err)
	}
	if claimed.Load() != 1 || inFlight.Load() != n-1 {
		t.Fatalf("%d concurrent claims: %d claimed, %d in flight; want 1 and %d", n, claimed.Load(), inFlight.Load(), n-1)
	}
}

func guarded(t *testing.T, s store.Store) store.GuardedStore {
	g, ok := s.(store.GuardedStore)
	if !ok {
		t.Skipf("%T holds no guards", s)
	}
	return g
}

func testGuard(t *testing.T, s store.Store, k keys) {
	g := guarded(t, s)
	key1, key2, guard := k.key("id1"), k.key("id2"), k.key("sha256:body")
	a, b := store.NewOwner(), store.NewOwner()
	res, err := g.ClaimGuarded(ctx, key1, guard, a, 10*time.Second)
	mustNil(t, "ClaimGuarded", err)
	wantState(t, "first guarded claim", res, store.StateClaimed)

	// the same bytes under another id find the guard taken, and take nothing
	res, err = g.ClaimGuarded(ctx, key2, guard, b, 10*time.Second)
	mustNil(t, "ClaimGuarded under another id", err)
	wantState(t, "guarded claim under another id", res, store.StateInFlight)
	wantState(t, "the other id is left untaken", claim(t, s, key2, b, time.Second), store.StateClaimed)
	mustNil(t, "Release", s.Release(ctx, key2, b))

	mustNil(t, "CompleteGuarded", g.CompleteGuarded(ctx, key1, guard, a, rec("a"), time.Hour))
	for _, key := range []string{key1, guard} {
		res := claim(t, s, key, b, time.Second)
		wantState(t, "claim of "+key+" after CompleteGuarded", res, store.StateCompleted)
		if !bytes.Equal(res.Record, rec("a")) {
			t.Fatalf("%s holds %q, want %q", key, res.Record, rec("a"))
		}
	}
	res, err = g.ClaimGuarded(ctx, key2, guard, b, time.Second)
	mustNil(t, "ClaimGuarded after completion", err)
	wantState(t, "a replay under another id", res, store.StateCompleted)

	// released together; a guard of "" is the key alone
	key3, guard3 := k.key("id3"), k.key("sha256:other")
	res, err = g.ClaimGuarded(ctx, key3, guard3, a, 10*time.Second)
	mustNil(t, "ClaimGuarded", err)
	wantState(t, "claim", res, store.StateClaimed)
	mustNil(t, "RenewGuarded", g.RenewGuarded(ctx, key3, guard3, a, 10*time.Second))
	wantNotOwner(t, "ReleaseGuarded by another owner", g.ReleaseGuarded(ctx, key3, guard3, b))
	mustNil(t, "ReleaseGuarded", g.ReleaseGuarded(ctx, key3, guard3, a))
	wantState(t, "key after ReleaseGuarded", claim(t, s, key3, b, time.Second), store.StateClaimed)
	wantState(t, "guard after ReleaseGuarded", claim(t, s, guard3, b, time.Second), store.StateClaimed)
	key4 := k.key("id4")
	res, err = g.ClaimGuarded(ctx, key4, "", a, 10*time.Second)
	mustNil(t, "ClaimGuarded without a guard", err)
	wantState(t, "claim without a guard", res, store.StateClaimed)
	mustNil(t, "CompleteGuarded without a guard", g.CompleteGuarded(ctx, key4, "", a, rec("4"), time.Hour))
	wantState(t, "completed without a guard", claim(t, s, key4, b, time.Second), store.StateCompleted)
}

func testNote(t *testing.T, s store.Store, k keys) {
	g := guarded(t, s)
	key1, key2, note := k.key("id1"), k.key("id2"), k.key("seen-sha256:body")
	a, b := store.NewOwner(), store.NewOwner()
	res, prev, err := g.ClaimNoted(ctx, key1, note, a, 10*time.Second, shortLease)
	mustNil(t, "ClaimNoted", err)
	wantState(t, "first noted claim", res, store.StateClaimed)
	if prev != "" {
		t.Fatalf("first noted claim found the note holding %q, want none", prev)
	}
	// the same bytes under another id: claimed, and told which key came first
	res, prev, err = g.ClaimNoted(ctx, key2, note, b, 10*time.Second, shortLease)
	mustNil(t, "ClaimNoted under another id", err)
	wantState(t, "noted claim under another id", res, store.StateClaimed)
	if prev != key1 {
		t.Fatalf("noted claim under another id found %q, want %q", prev, key1)
	}
	// a retry of the first, released, finds its own key
	mustNil(t, "Release", s.Release(ctx, key1, a))
	res, prev, err = g.ClaimNoted(ctx, key1, note, a, 10*time.Second, shortLease)
	mustNil(t, "ClaimNoted again", err)
	wantState(t, "noted claim of the released key", res, store.StateClaimed)
	if prev != key1 {
		t.Fatalf("the first key's retry found %q, want its own key %q", prev, key1)
	}
	// a key in flight is reported as Claim reports it
	res, _, err = g.ClaimNoted(ctx, key1, note, b, 10*time.Second, shortLease)
	mustNil(t, "ClaimNoted of a key in flight", err)
	noted := time.Now()
	wantState(t, "noted claim of a key in flight", res, store.StateInFlight)
	// the note expires
	time.Sleep(time.Until(noted.Add(shortLease + pastEnd)))
	key3 := k.key("id3")
	_, prev, err = g.ClaimNoted(ctx, key3, note, b, 10*time.Second, time.Second)
	mustNil(t, "ClaimNoted after the note's ttl", err)
	if prev != "" {
		t.Fatalf("note still held %q after its ttl", prev)
	}
}

func testKeyAdmin(t *testing.T, s store.Store, k keys) {
	ka, ok := s.(store.KeyAdmin)
	if !ok {
		t.Skipf("%T has no key administration", s)
	}
	key, a := k.key("k"), store.NewOwner()
	info, err := ka.Inspect(ctx, key)
	mustNil(t, "Inspect", err)
	if info.State != store.KeyAbsent {
		t.Fatalf("absent key inspected as %s", info.State)
	}
	wantState(t, "claim", claim(t, s, key, a, 10*time.Second), store.StateClaimed)
	info, err = ka.Inspect(ctx, key)
	mustNil(t, "Inspect", err)
	if info.State != store.KeyInFlight || info.Left <= 0 || info.Left > 10*time.Second {
		t.Fatalf("key in flight inspected as %s with %s left", info.State, info.Left)
	}
	info, err = ka.Forget(ctx, key)
	mustNil(t, "Forget", err)
	if info.State != store.KeyInFlight {
		t.Fatalf("Forget of a key in flight found %s", info.State)
	}
	mustNil(t, "Complete after a refused Forget", s.Complete(ctx, key, a, rec("a"), time.Hour))
	info, err = ka.Inspect(ctx, key)
	mustNil(t, "Inspect", err)
	if info.State != store.KeyCompleted || !bytes.Equal(info.Record, rec("a")) || info.Left <= 59*time.Minute || info.Left > time.Hour {
		t.Fatalf("completed key inspected as %s, record %q, %s left", info.State, info.Record, info.Left)
	}
	forgot, err := ka.ForgetIf(ctx, key, rec("other"))
	mustNil(t, "ForgetIf", err)
	if forgot {
		t.Fatal("ForgetIf with another record forgot the key")
	}
	info, err = ka.Forget(ctx, key)
	mustNil(t, "Forget", err)
	if info.State != store.KeyCompleted {
		t.Fatalf("Forget of a completed key found %s", info.State)
	}
	wantState(t, "claim after Forget", claim(t, s, key, a, time.Second), store.StateClaimed)
	mustNil(t, "Complete", s.Complete(ctx, key, a, rec("b"), time.Hour))
	forgot, err = ka.ForgetIf(ctx, key, rec("b"))
	mustNil(t, "ForgetIf", err)
	if !forgot {
		t.Fatal("ForgetIf with the key's record did not forget it")
	}
	info, err = ka.Inspect(ctx, key)
	mustNil(t, "Inspect", err)
	if info.State != store.KeyAbsent {
		t.Fatalf("key after ForgetIf inspected as %s", info.State)
	}
}
