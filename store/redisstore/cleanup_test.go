package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestRedisStoreCleanupLeavesNothingBehind: a store that Caddy loads and
// cleans up with its configuration, as `caddy validate` does five times
// over, leaves no goroutine, no connection and no shared client behind.
// (e2e/redis's TestReloadValidateLeavesNothingBehindRedis validates whole
// configurations.)
func TestRedisStoreCleanupLeavesNothingBehind(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	cfg := []byte(`{"url":"redis://` + srv.Addr() + `"}`)
	before := testkit.SettledGoroutines(nil, 0, 500*time.Millisecond)
	for range 5 {
		ctx, cancel := testkit.NewContext(t)
		mod, err := ctx.LoadModuleByID("http.webhook_idempotency.stores.redis", cfg)
		if err != nil {
			t.Fatalf("loading the store: %v", err)
		}
		if s := mod.(*Store); s.client == nil || !s.ref.Held() {
			t.Fatal("the loaded store holds no shared client")
		}
		cancel() // cleans up the modules loaded through ctx
	}
	if after := testkit.SettledGoroutines(nil, before+2, 30*time.Second); after > before+2 {
		t.Fatalf("goroutines grew from %d to %d after 5 loads and cleanups", before, after)
	}
	// the server notices closed connections asynchronously: poll
	testkit.Eventually(t, 30*time.Second, "the store's connections closed", func() bool {
		list, err := rc.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatalf("CLIENT LIST: %v", err)
		}
		return !strings.Contains(list, " name="+redisClientName+" ")
	})
	redisPool.Range(func(key, _ any) bool {
		if s, ok := key.(string); ok && strings.Contains(s, srv.Addr()) {
			t.Errorf("cleanup left a client in the pool: %s", s)
		}
		return true
	})
}
