package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// replicasShort reads store_replicas_short_total for a node and op.
func replicasShort(t *testing.T, addr, op string) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.StoreReplicasShort.WithLabelValues(addr, op).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// `replicas 1 … completions` (docs/stores.md, "Failover"): a completion
// returns once the replica has the record (and its guard's); while the
// replica does not answer, a completion waits replicas_timeout, is
// recorded on the master, and the shortfall is counted and logged with the
// key.
func TestRedisStoreReplicatedCompletions(t *testing.T) {
	t.Parallel()
	master := testkit.StartRedis(t)
	replica := testkit.StartReplica(t, master)
	core, logs := observer.New(zap.WarnLevel)
	// replicas_timeout is what the healthy replica has to acknowledge on a
	// loaded machine (the completion below asserts it did); the paused
	// replica's completion waits it out. The calls outlast it.
	const replicasTimeout = 2 * time.Second
	s := &Store{Addresses: []string{master.Addr()}, Replicas: 1, ReplicasTimeout: caddy.Duration(replicasTimeout), ReplicasCompletions: true, Timeout: caddy.Duration(10 * time.Second)}
	if err := s.provisionWith(zap.New(core)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cleanup() })
	ctx := context.Background()
	rc := replica.Client(t)

	rec := testRecord("replicated")
	if _, err := s.ClaimGuarded(ctx, "idem:test:r1", "idem:test:g1", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteGuarded(ctx, "idem:test:r1", "idem:test:g1", "a", rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	// the replica has both as soon as the completion returns
	for _, k := range []string{"idem:test:r1", "idem:test:g1"} {
		if v := rc.Get(ctx, k).Val(); v != string(rec) {
			t.Fatalf("the replica holds %q under %s right after the completion, want the record", v, k)
		}
	}

	before := replicasShort(t, master.Addr(), "complete")
	replica.Pause()
	defer replica.Resume()
	if _, err := s.Claim(ctx, "idem:test:r2", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Complete(ctx, "idem:test:r2", "a", rec, time.Minute); err != nil {
		t.Fatalf("completion the replica did not acknowledge: %v, want it recorded on the master", err)
	}
	if d := time.Since(start); d < replicasTimeout {
		t.Fatalf("the completion returned after %v, without waiting replicas_timeout (%v)", d, replicasTimeout)
	}
	res, err := s.Claim(ctx, "idem:test:r2", "b", time.Minute)
	if err != nil || res.State != store.StateCompleted {
		t.Fatalf("after the completion: %v %v, want the key completed on the master", res.State, err)
	}
	if got := replicasShort(t, master.Addr(), "complete") - before; got != 1 {
		t.Fatalf("store_replicas_short_total{op=complete} rose by %v, want 1", got)
	}
	if l := logs.FilterMessageSnippet("fewer redis replicas").FilterField(zap.String("key", "idem:test:r2")); l.Len() != 1 {
		t.Fatalf("%d WARNs naming the key about the shortfall, want 1", l.Len())
	}
	// an owner that lost its key still learns it
	if err := s.Complete(ctx, "idem:test:r3", "a", rec, time.Minute); err != store.ErrNotOwner {
		t.Fatalf("completion of a key never claimed: %v, want ErrNotOwner", err)
	}
}
