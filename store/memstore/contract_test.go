package memstore_test

import (
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		ctx, cancel := testkit.NewContext(t)
		s := new(memstore.Store)
		if err := s.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.Cleanup()
			cancel()
		})
		return s
	})
}
