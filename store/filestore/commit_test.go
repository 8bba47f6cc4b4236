package filestore

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
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
