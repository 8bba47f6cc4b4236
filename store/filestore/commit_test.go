package filestore

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// TestCommitsAndCompletionsShareBatches: transactions of the inbox and the
// archive (commit) and completions (commitPuts) that land in one batch are
// each answered once, after their own write: a transaction the applier
// finished is not looked at again by the committer, whose answer to it
// would go to the next write that reuses it (run with -race, which sees
// the committer read a write its submitter already gave back).
func TestCommitsAndCompletionsShareBatches(t *testing.T) {
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if err := d.commit(context.Background(), func(*bolt.Tx) error { return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	completeKeys(t, d, "batch", 800, 4, 16)
	wg.Wait()
}

// TestEveryTreeCommitIsSynced: with `sync <interval>` too, a commit of the
// tree is synced before it is answered: an inbox's acceptance (a
// completion with the event in its transaction) and every other write
// through commit are on disk once answered, and bbolt never commits
// without its two fdatasyncs, which a power loss could otherwise leave as
// a damaged file (docs/stores.md, "The file store").
func TestEveryTreeCommitIsSynced(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	d.syncEvery.Store(int64(time.Hour))
	unsynced := func(what string) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			if tx.DB().NoSync {
				t.Errorf("%s: committed without fdatasync", what)
			}
			return nil
		}
	}
	if err := d.commit(context.Background(), unsynced("a transaction")); err != nil {
		t.Fatal(err)
	}
	owner := store.NewOwner()
	if _, _, err := d.claim("synced:event", "", owner, time.Minute, 0, claimPlain, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.complete(context.Background(), "synced:event", "", owner, []byte("\x01accepted"), time.Hour, &also{before: unsynced("an acceptance")}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.commit(context.Background(), unsynced("a transaction after a sweep")); err != nil {
		t.Fatal(err)
	}
}
