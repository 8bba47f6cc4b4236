package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The log (log.go): a completion is on disk once it is in the log, before
// the tree has it, so what the log holds must come back at open, whole
// records only, across the log's two segments; and Export must read it.

// openTest opens a store file for a test and closes it when the test ends
// (unless the test closed it first, with closeTest).
func openTest(t *testing.T, path string) *db {
	t.Helper()
	d, err := openDB(path, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	closers.Store(d, new(sync.Once))
	t.Cleanup(func() { closeTest(t, d) })
	return d
}

var closers sync.Map // *db: *sync.Once

// closeTest closes a store file openTest opened, once.
func closeTest(t *testing.T, d *db) {
	once, _ := closers.Load(d)
	once.(*sync.Once).Do(func() {
		if err := d.Destruct(); err != nil {
			t.Error(err)
		}
	})
}

// holdApplier keeps the tree from taking what the log holds, unless a
// write waits for it.
func holdApplier(d *db) {
	d.ap.mu.Lock()
	d.ap.delay = time.Hour
	d.ap.mu.Unlock()
}

// completeKeys claims and completes keys with a record naming each, from
// goroutines goroutines, and returns the records by key.
func completeKeys(t *testing.T, d *db, prefix string, n, goroutines, size int) map[string]string {
	t.Helper()
	var mu sync.Mutex
	done := map[string]string{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < n; i += goroutines {
				key := fmt.Sprintf("%s:%05d", prefix, i)
				rec := "\x01" + key + strings.Repeat("x", size)
				owner := store.NewOwner()
				if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
					t.Errorf("claim %s: %v %v", key, res.State, err)
					return
				}
				if err := d.complete(context.Background(), key, "", owner, []byte(rec), time.Hour, nil); err != nil {
					t.Errorf("complete %s: %v", key, err)
					return
				}
				mu.Lock()
				done[key] = rec
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return done
}

// copyFiles copies the store file of d and its log to a new path, as
// they are on disk this moment (what a machine that stopped now would
// have, short of what the disk had not been told to keep), and returns
// it.
func copyFiles(t *testing.T, d *db) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "copy.db")
	// within a write transaction: the tree is not committed to while it is
	// read, so the copy is the file as a crash would leave it, not pages of
	// two commits (a tree no crash can leave, which the store refuses)
	tx, err := d.bolt.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, suffix := range []string{"", ".log"} {
		data, err := os.ReadFile(d.path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// checkCompleted checks that d answers every key of want with its record.
func checkCompleted(t *testing.T, d *db, want map[string]string) {
	t.Helper()
	for key, rec := range want {
		res, _, err := d.claim(key, "", store.NewOwner(), time.Minute, 0, claimPlain, nil)
		if err != nil || res.State != store.StateCompleted || string(res.Record) != rec {
			t.Fatalf("%s: %s %v, want it completed with its record", key, res.State, err)
		}
	}
}

// waitApplied waits until the tree holds every record the log has.
func waitApplied(t *testing.T, d *db) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.ap.applied() < d.log.last {
		if time.Now().After(deadline) {
			t.Fatalf("the tree holds record %d of %d after 10 s", d.ap.applied(), d.log.last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogRecoversWhatTheTreeLacks: completions answered while the tree
// did not have them yet are completed after a stop without Destruct, and
// the tree takes them; opened again, the store answers them from the tree.
func TestLogRecoversWhatTheTreeLacks(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	holdApplier(d)
	want := completeKeys(t, d, "rec", 600, 16, 100)
	if records, _ := counts(t, d); records != 0 {
		t.Fatalf("the tree holds %d records while the applier is held, want 0", records)
	}
	path := copyFiles(t, d)
	d2 := openTest(t, path)
	checkCompleted(t, d2, want)
	waitApplied(t, d2)
	if records, index := counts(t, d2); records != len(want) || index != len(want) {
		t.Fatalf("after the log is applied the tree holds %d records and %d index entries, want %d", records, index, len(want))
	}
	closeTest(t, d2)
	d3 := openTest(t, path)
	d3.ap.mu.Lock()
	left := len(d3.ap.items)
	d3.ap.mu.Unlock()
	if left != 0 {
		t.Fatalf("opened again, %d records of the log are taken for the tree's, want none", left)
	}
	checkCompleted(t, d3, want)
}

// TestLogTornRecord: a record that did not reach the disk whole is not
// applied, and neither is anything after it; what came before is.
func TestLogTornRecord(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	holdApplier(d)
	// one goroutine: one key per record
	want := completeKeys(t, d, "torn", 50, 1, 100)
	path := copyFiles(t, d)
	f, err := os.OpenFile(path+".log", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// a byte in the middle of the last record
	if _, err := f.WriteAt([]byte{0xff}, int64(d.log.seg)*segSize+d.log.off-20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	lost := "torn:00049"
	delete(want, lost)
	d2 := openTest(t, path)
	checkCompleted(t, d2, want)
	if res, _, err := d2.claim(lost, "", store.NewOwner(), time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
		t.Fatalf("%s, whose record was torn: %s %v, want it absent", lost, res.State, err)
	}
}

// TestLogSegments: records go to the log's two segments in turn, many
// times over; what the tree does not hold after any number of turns comes
// back at open, in order.
func TestLogSegments(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	// 8 KiB records: about 128 to a segment, so 1,500 make a dozen turns
	want := completeKeys(t, d, "seg", 1500, 4, 8<<10)
	if d.log.last < 1500/4 {
		t.Fatalf("%d records written, want at least %d", d.log.last, 1500/4)
	}
	holdApplier(d)
	more := completeKeys(t, d, "seg-held", 200, 4, 8<<10)
	path := copyFiles(t, d)
	d2 := openTest(t, path)
	checkCompleted(t, d2, want)
	checkCompleted(t, d2, more)
	waitApplied(t, d2)
}

// TestExportReadsTheLog: Export of a store whose log holds completions the
// tree does not gives them with the tree's, each key once, in key order.
func TestExportReadsTheLog(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	inTree := completeKeys(t, d, "exp-b", 100, 4, 10)
	waitApplied(t, d)
	holdApplier(d)
	inLog := completeKeys(t, d, "exp-a", 100, 4, 10)
	inLog2 := completeKeys(t, d, "exp-c", 100, 4, 10)
	path := copyFiles(t, d)
	var got []string
	err := Export(path, func(v Value) error {
		got = append(got, v.Key)
		for _, want := range []map[string]string{inTree, inLog, inLog2} {
			if rec, ok := want[v.Key]; ok && string(v.Payload) != rec {
				t.Errorf("%s: exported %q, want %q", v.Key, v.Payload, rec)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 {
		t.Fatalf("exported %d values, want 300", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatalf("exported %s before %s: not in key order, or twice", got[i-1], got[i])
		}
	}
}

// TestFilterHasEveryKeyOfTheTree: the filter that spares a new key's claim
// a read of the tree never says "absent" of a key the tree holds, while
// keys are completed and the filter is built again and again meanwhile;
// the filter grows with the keys.
func TestFilterHasEveryKeyOfTheTree(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	d.ap.mu.Lock()
	d.ap.delay = time.Millisecond // many commits
	d.ap.mu.Unlock()
	stop := make(chan struct{})
	var builds sync.WaitGroup
	builds.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := d.filter.build(d, d.stop); err != nil {
				t.Error(err)
				return
			}
		}
	})
	want := completeKeys(t, d, "filter", 20000, 16, 10)
	close(stop)
	builds.Wait()
	waitApplied(t, d)
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		clear(s.cache)
		s.cached = 0
		s.mu.Unlock()
	}
	for key := range want {
		if !d.filter.mayHave(key) {
			t.Fatalf("the filter says %s, which the tree holds, is absent", key)
		}
	}
	checkCompleted(t, d, want)
	if b := d.filter.bits.Load(); b.keys < 20000 {
		t.Fatalf("the filter is sized for %d keys after a build over 20000", b.keys)
	}
	absent := 0
	for i := range 10000 {
		if !d.filter.mayHave(fmt.Sprintf("absent:%d", i)) {
			absent++
		}
	}
	if absent < 9900 {
		t.Fatalf("the filter told %d of 10000 absent keys absent, want at least 9900", absent)
	}
}

// TestPowerLossKeepsEveryAnsweredCompletion: a model of a power loss
// under load. The disk holds of the log what it held at its last
// fdatasync; the power goes while the committer syncs a batch it has
// written (the 12th). Opened from what the disk holds, the store has
// every completion answered before, and none of the batch on its way to
// the disk or after it, which were not answered: a write that never
// reached fdatasync is lost, nothing else (docs/stores.md). The tree is
// held, so its file on disk is what its last, synced commit left.
func TestPowerLossKeepsEveryAnsweredCompletion(t *testing.T) {
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	holdApplier(d)
	const cutAt = 12
	var (
		mu      sync.Mutex
		durable []byte // the log as the disk holds it
		syncs   int
	)
	errPower := errors.New("the power is off")
	d.log.syncData = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if syncs++; syncs >= cutAt {
			return errPower
		}
		if err := fdatasync(f); err != nil {
			return err
		}
		data, err := os.ReadFile(f.Name())
		durable = data
		return err
	}
	var (
		answered = map[string]string{}
		refused  []string
		wg       sync.WaitGroup
	)
	for g := range 16 {
		wg.Go(func() {
			for i := range 1000 { // a store that never refuses stops too
				key := fmt.Sprintf("power:%02d:%04d", g, i)
				rec := "\x01" + key
				owner := store.NewOwner()
				if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
					t.Errorf("claim %s: %s %v", key, res.State, err)
					return
				}
				err := d.complete(context.Background(), key, "", owner, []byte(rec), time.Hour, nil)
				mu.Lock()
				if err == nil {
					answered[key] = rec
				} else {
					refused = append(refused, key)
				}
				mu.Unlock()
				if err != nil {
					if !errors.Is(err, errPower) {
						t.Errorf("complete %s: %v", key, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	path := copyFiles(t, d)
	if err := os.WriteFile(logPath(path), durable, 0o600); err != nil {
		t.Fatal(err)
	}
	d2 := openTest(t, path)
	checkCompleted(t, d2, answered)
	if len(answered) == 0 || len(refused) == 0 {
		t.Fatalf("%d completions answered and %d refused before and after the power went, want some of each", len(answered), len(refused))
	}
	for _, key := range refused {
		if res, _, err := d2.claim(key, "", store.NewOwner(), time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
			t.Fatalf("%s, never answered and never synced: %s %v after the power loss, want it absent", key, res.State, err)
		}
	}
}
