package filestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// A batch's completion is one record of the log (one fdatasync), on disk
// when CompleteBatch returns: a copy of the files taken then, the tree not
// having the records yet, answers every item with its record. And a batch
// claim of keys that only the file can tell reads the file once, in one
// read transaction, however many keys it holds.
func TestBatchOneCommitOneRead(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	holdApplier(d)
	keys := make([]string, 100)
	recs := make([][]byte, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("batch:%03d", i)
		recs[i] = []byte("\x01record of " + keys[i])
	}
	owner := store.NewOwner()
	res, err := d.claimBatch(keys, owner, time.Minute, store.BatchUnlessInFlight, nil)
	if err != nil || res.Claimed != len(keys) {
		t.Fatalf("claim: %d of %d claimed, %v", res.Claimed, len(keys), err)
	}
	logs := d.logWrites.Load()
	if err := d.completeBatch(context.Background(), keys, owner, recs, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n := d.logWrites.Load() - logs; n != 1 {
		t.Fatalf("a batch's completion wrote %d records to the log, want 1", n)
	}
	if records, _ := counts(t, d); records != 0 {
		t.Fatalf("the tree holds %d records while the applier is held, want 0", records)
	}
	want := make(map[string]string, len(keys))
	for i, k := range keys {
		want[k] = string(recs[i])
	}
	path := copyFiles(t, d)

	// the copy, opened, applies its log to the tree; opened again, its
	// memory holds none of the keys, which only the tree can tell
	d2 := openTest(t, path)
	waitApplied(t, d2)
	closeTest(t, d2)
	d3 := openTest(t, path)
	d3.building.Wait() // the keys' filter, read from the tree at open
	absent := []string{"batch:absent:1", "batch:absent:2"}
	all := append(append([]string(nil), keys...), absent...)
	reads := d3.bolt.Stats().TxN
	res, err = d3.claimBatch(all, store.NewOwner(), time.Minute, store.BatchUnlessInFlight, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := d3.bolt.Stats().TxN - reads; n != 1 {
		t.Fatalf("a batch claim of %d keys the file holds opened %d read transactions, want 1", len(keys), n)
	}
	if res.Completed != len(keys) || res.Claimed != len(absent) {
		t.Fatalf("batch claim after reopening: %d completed, %d claimed; want %d and %d", res.Completed, res.Claimed, len(keys), len(absent))
	}
	for i, k := range keys {
		if string(res.Items[i].Record) != want[k] {
			t.Fatalf("%s after reopening: record %q, want %q", k, res.Items[i].Record, want[k])
		}
	}
	checkCompleted(t, d3, want)
}
