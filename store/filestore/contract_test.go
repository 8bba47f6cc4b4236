package filestore_test

import (
	"path/filepath"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

// open provisions a file store on a file of its own.
func open(t *testing.T, path string, sync string) *filestore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path, Sync: sync}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Cleanup()
		cancel()
	})
	return s
}

func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "store.db"), "")
	})
}

func TestContractSyncInterval(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "store.db"), "50ms")
	})
}
