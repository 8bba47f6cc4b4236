package filestore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	bolt "go.etcd.io/bbolt"
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
	if err := d.completeBatch(context.Background(), keys, owner, recs, time.Hour, nil); err != nil {
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

// ClaimAndAppendBatch claims the absent keys of a request's items and runs
// the append step for all of them in one commit, with their records: a
// completed key and one in flight are reported as they are and get no
// event; a failing append step stores nothing and releases the keys it
// claimed; overlapping batches at once claim each key exactly once.
func TestClaimAndAppendBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	s := &Store{Path: filepath.Join(t.TempDir(), "store.db")}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Cleanup()
	f := s.File()
	events := []byte("test-events")
	appendTo := func(keys []string, calls *[][]int) func(tx *bolt.Tx, claimed []int) error {
		return func(tx *bolt.Tx, claimed []int) error {
			*calls = append(*calls, slices.Clone(claimed))
			b, err := tx.CreateBucketIfNotExists(events)
			if err != nil {
				return err
			}
			for _, i := range claimed {
				if b.Get([]byte(keys[i])) != nil {
					return fmt.Errorf("%s appended twice", keys[i])
				}
				if err := b.Put([]byte(keys[i]), []byte("event")); err != nil {
					return err
				}
			}
			return nil
		}
	}
	stored := func() map[string]bool {
		out := map[string]bool{}
		_ = f.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(events); b != nil {
				return b.ForEach(func(k, _ []byte) error { out[string(k)] = true; return nil })
			}
			return nil
		})
		return out
	}
	rec := func(k string) []byte {
		sum := sha256.Sum256([]byte(k))
		return record.Encode(nil, http.StatusAccepted, nil, &sum)
	}

	owner := store.NewOwner()
	if _, err := s.Claim(ctx, "done", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "done", owner, rec("done"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "busy", store.NewOwner(), time.Minute); err != nil {
		t.Fatal(err)
	}
	keys := []string{"done", "busy", "new1", "new2", "new3"}
	recs := make([][]byte, len(keys))
	for i, k := range keys {
		recs[i] = rec(k)
	}
	var calls [][]int
	res, err := f.ClaimAndAppendBatch(ctx, keys, recs, time.Hour, appendTo(keys, &calls))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.State{store.StateCompleted, store.StateInFlight, store.StateClaimed, store.StateClaimed, store.StateClaimed}
	for i, it := range res.Items {
		if it.State != want[i] {
			t.Fatalf("%s: %s, want %s", keys[i], it.State, want[i])
		}
	}
	if fmt.Sprint(calls) != "[[2 3 4]]" {
		t.Fatalf("append step calls %v, want one, with the three new keys", calls)
	}
	if got := stored(); len(got) != 3 || !got["new1"] || !got["new2"] || !got["new3"] {
		t.Fatalf("events stored %v, want new1, new2, new3", got)
	}
	for _, k := range keys[2:] {
		r, err := s.Claim(ctx, k, store.NewOwner(), time.Minute)
		if err != nil || r.State != store.StateCompleted || string(r.Record) != string(rec(k)) {
			t.Fatalf("%s after the batch: %s %q %v, want completed with its record", k, r.State, r.Record, err)
		}
	}

	// a failing append step: nothing stored, the keys free again
	failing := []string{"fail1", "fail2"}
	_, err = f.ClaimAndAppendBatch(ctx, failing, [][]byte{rec("fail")}, time.Hour, func(*bolt.Tx, []int) error {
		return errors.New("refused")
	})
	if err == nil {
		t.Fatal("a failing append step: no error")
	}
	for _, k := range failing {
		if r, err := s.Claim(ctx, k, store.NewOwner(), time.Minute); err != nil || r.State != store.StateClaimed {
			t.Fatalf("%s after a failed batch: %s %v, want free (claimed anew)", k, r.State, err)
		}
	}

	// overlapping batches at once: 8 windows of 20 over 50 keys
	all := make([]string, 50)
	for i := range all {
		all[i] = fmt.Sprintf("overlap:%02d", i)
	}
	claimed := make([]atomic.Int32, len(all))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			from := w * 30 / 7
			win := all[from : from+20]
			var calls [][]int
			res, err := f.ClaimAndAppendBatch(ctx, win, [][]byte{rec("overlap")}, time.Hour, appendTo(win, &calls))
			if err != nil {
				errs <- err
				return
			}
			for i, it := range res.Items {
				if it.State == store.StateClaimed {
					claimed[from+i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := stored()
	for i, k := range all {
		if n := claimed[i].Load(); n != 1 || !got[k] {
			t.Fatalf("%s claimed %d times by the overlapping batches, event stored %v; want once, stored", k, n, got[k])
		}
	}
}
