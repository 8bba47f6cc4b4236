package redisstore_test

import (
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

// openOn returns the suite's opener of redis stores with addresses. Their
// calls are bounded at 10s, not the default 500ms: the contract is about
// what the store does, and on a loaded machine a call to a Cluster of
// three masters may take longer than 500ms without anything being wrong.
func openOn(addrs ...string) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		ctx, cancel := testkit.NewContext(t)
		s := &redisstore.Store{Addresses: addrs, Timeout: caddy.Duration(10 * time.Second)}
		if err := s.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.Cleanup()
			cancel()
		})
		return s
	}
}

func TestContractStandalone(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	storetest.Run(t, openOn(srv.Addr()))
}

func TestContractCluster(t *testing.T) {
	t.Parallel()
	c := testkit.StartCluster(t)
	storetest.Run(t, openOn(c.Addrs()...))
}
