package filestore_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// A duplicate's claim, answered from memory: the CPU a replay costs the
// store, from parallel goroutines.
func BenchmarkFileReplayClaim(b *testing.B) {
	ctx, cancel := testkit.NewContext(b)
	defer cancel()
	s := &filestore.Store{Path: filepath.Join(b.TempDir(), "store.db"), Sync: "1s"}
	if err := s.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Cleanup()
	const keys = 1000
	rec := append([]byte{1}, make([]byte, 120)...)
	for i := range keys {
		owner := store.NewOwner()
		key := fmt.Sprint("idem:bench:", i)
		if _, err := s.Claim(b.Context(), key, owner, time.Minute); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(b.Context(), key, owner, rec, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprint("idem:bench:", n.Add(1)%keys)
			res, err := s.Claim(b.Context(), key, "x", time.Minute)
			if err != nil || res.State != store.StateCompleted {
				b.Fatal(res.State, err)
			}
		}
	})
}
