package filestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// fill completes n keys of round with ttl, from 16 goroutines.
func fill(t *testing.T, d *db, round, n int, ttl time.Duration) {
	t.Helper()
	rec := []byte("\x01" + string(make([]byte, 200)))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				key := fmt.Sprintf("sweep:%d:%d", round, i)
				owner := store.NewOwner()
				if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
					errs <- fmt.Errorf("claim %s: %v %v", key, res.State, err)
					return
				}
				if err := d.complete(context.Background(), key, "", owner, rec, ttl, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func counts(t *testing.T, d *db) (records, index int) {
	t.Helper()
	if err := d.view(func(tx *bolt.Tx) error {
		records = tx.Bucket(bucketRecords).Stats().KeyN
		index = tx.Bucket(bucketExpiry).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return records, index
}

// TestSweepDeletesWhatExpired: the sweep deletes every expired record and
// its index entry, and only those.
func TestSweepDeletesWhatExpired(t *testing.T) {
	t.Parallel()
	d, err := openDB(filepath.Join(t.TempDir(), "store.db"), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destruct()
	d.syncEvery.Store(int64(time.Hour)) // the disk's speed is not what is tested
	fill(t, d, 0, 6000, 50*time.Millisecond)
	fill(t, d, 1, 100, time.Hour)
	time.Sleep(100 * time.Millisecond)
	// the background sweep may have taken some already
	if _, err := d.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if records, index := counts(t, d); records != 100 || index != 100 {
		t.Fatalf("after the sweep: %d records, %d index entries; want 100 and 100", records, index)
	}
	// a record rewritten with a later expiry is not swept by its old entry
	owner := store.NewOwner()
	if _, _, err := d.claim("sweep:rewritten", "", owner, time.Minute, 0, claimPlain, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.complete(context.Background(), "sweep:rewritten", "", owner, []byte("\x01first"), 30*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.forget(context.Background(), "sweep:rewritten", nil); err != nil {
		t.Fatal(err)
	}
	owner = store.NewOwner()
	if _, _, err := d.claim("sweep:rewritten", "", owner, time.Minute, 0, claimPlain, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.complete(context.Background(), "sweep:rewritten", "", owner, []byte("\x01second"), time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if _, err := d.sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := d.inspect("sweep:rewritten")
	if err != nil || info.State != store.KeyCompleted || string(info.Record) != "\x01second" {
		t.Fatalf("rewritten record after the sweep: %v %q %v", info.State, info.Record, err)
	}
}

// TestFileSizeStaysBounded: under a steady rate of new keys and expiries
// the file stops growing: the pages of what was swept are used again.
func TestFileSizeStaysBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	d, err := openDB(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destruct()
	d.syncEvery.Store(int64(time.Hour))
	// commits of the tree every 20 ms, not every 250: the rounds here are
	// 20 ms keys swept within 30 ms, and a commit that takes in a whole
	// round's keys to sweep them at once needs as many free pages as they
	// fill, which the file grows for once, at whatever round it comes
	d.ap.mu.Lock()
	d.ap.delay = 20 * time.Millisecond
	d.ap.mu.Unlock()
	var sizes []int64
	for round := range 10 {
		fill(t, d, round, 2000, 20*time.Millisecond)
		// the round in the tree before its sweep, however slow the
		// machine: a sweep's commit that also took in the round's keys
		// would need free pages for all of them at once
		waitApplied(t, d)
		time.Sleep(30 * time.Millisecond)
		if _, err := d.sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	if records, _ := counts(t, d); records != 0 {
		t.Fatalf("%d records left after the last sweep", records)
	}
	// after the first rounds the size stays where it got, but for one
	// step of the file's growth (AllocSize): a commit that finds the
	// pages freed by the one before it still held by a reader takes new
	// ones
	if sizes[len(sizes)-1] > sizes[3]+int64(d.bolt.AllocSize) {
		t.Fatalf("file size grew after round 4 by more than one step of %d bytes: %v", d.bolt.AllocSize, sizes)
	}
}
