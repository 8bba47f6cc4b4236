package filestore_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// provisionAt provisions a file store at path as a configuration would;
// the caller cleans it up, as Caddy cleans up an old configuration.
func provisionAt(t *testing.T, path string) *filestore.Store {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	t.Cleanup(cancel)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// fileHeld reports whether this process still holds path open: bbolt's
// lock is per open file, so a second open waits for it while it is held.
func fileHeld(t *testing.T, path string) bool {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 300 * time.Millisecond})
	if errors.Is(err, berrors.ErrTimeout) {
		return true
	}
	if err != nil {
		t.Fatalf("opening %s: %v", path, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return false
}

// A reload provisions the new configuration before it cleans up the old
// one: an unchanged path shares the open file (the old configuration's
// cleanup closes nothing the new one uses), and a changed path opens the
// new file and closes the old one once nothing uses it.
func TestReloadSharesTheFileAndAChangedPathClosesTheOld(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.db"), filepath.Join(dir, "second.db")

	old := provisionAt(t, first)
	owner := store.NewOwner()
	if _, err := old.Claim(t.Context(), "reload:k", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := old.Complete(t.Context(), "reload:k", owner, recordOf("reload:k"), time.Hour); err != nil {
		t.Fatal(err)
	}

	// an unchanged reload: the new configuration first, then the old one's cleanup
	same := provisionAt(t, first)
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !fileHeld(t, first) {
		t.Fatal("the old configuration's cleanup closed the file the new one uses")
	}
	res, err := same.Claim(t.Context(), "reload:k", store.NewOwner(), time.Minute)
	if err != nil || res.State != store.StateCompleted {
		t.Fatalf("a record after an unchanged reload: %s, %v; want completed", res.State, err)
	}

	// a reload that changes the path
	moved := provisionAt(t, second)
	t.Cleanup(func() { _ = moved.Cleanup() })
	if !fileHeld(t, first) {
		t.Fatal("the first file was closed while the old configuration still used it")
	}
	if err := same.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if fileHeld(t, first) {
		t.Fatal("the first file is still open after the last configuration using it was cleaned up")
	}
	if !fileHeld(t, second) {
		t.Fatal("the second file is not open")
	}
	res, err = moved.Claim(t.Context(), "reload:k", store.NewOwner(), time.Minute)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("the new file holds the old file's record: %s, %v", res.State, err)
	}

	// the first file kept its record when it was closed
	reopened := provisionAt(t, first)
	t.Cleanup(func() { _ = reopened.Cleanup() })
	res, err = reopened.Claim(t.Context(), "reload:k", store.NewOwner(), time.Minute)
	if err != nil || res.State != store.StateCompleted {
		t.Fatalf("the first file reopened: %s, %v; want its record", res.State, err)
	}
}

// A reload that changes the path cleans the old configuration up while its
// requests still run: a request that claimed in the old file completes in
// it (the file is closed once its last claim is done), and one that claims
// only after that (it was reading its body) takes the file again. Before,
// the completion failed: "file store: … is closed".
func TestReloadKeepsTheOldFileForItsRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.db"), filepath.Join(dir, "second.db")
	old := provisionAt(t, first)
	running := store.NewOwner()
	if res, err := old.Claim(t.Context(), "moved:running", running, time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %s %v", res.State, err)
	}
	// the reload: the new configuration on another file, then the old
	// one's cleanup, with its request still running
	moved := provisionAt(t, second)
	t.Cleanup(func() { _ = moved.Cleanup() })
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !fileHeld(t, first) {
		t.Fatal("the old file was closed under a request that claimed in it")
	}
	if err := old.Renew(t.Context(), "moved:running", running, time.Minute); err != nil {
		t.Fatalf("renewing the running request's lease: %v", err)
	}
	if err := old.Complete(t.Context(), "moved:running", running, recordOf("moved:running"), time.Hour); err != nil {
		t.Fatalf("the running request's completion: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the old file closed after its last request", func() bool { return !fileHeld(t, first) })

	// a request of the old configuration that claims only now
	late := store.NewOwner()
	if res, err := old.Claim(t.Context(), "moved:late", late, time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("a late claim: %s %v", res.State, err)
	}
	if !fileHeld(t, first) {
		t.Fatal("a late claim did not take the old file again")
	}
	if err := old.Complete(t.Context(), "moved:late", late, recordOf("moved:late"), time.Hour); err != nil {
		t.Fatalf("the late request's completion: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the old file closed after the late request", func() bool { return !fileHeld(t, first) })

	reopened := provisionAt(t, first)
	t.Cleanup(func() { _ = reopened.Cleanup() })
	for _, key := range []string{"moved:running", "moved:late"} {
		res, err := reopened.Claim(t.Context(), key, store.NewOwner(), time.Minute)
		if err != nil || res.State != store.StateCompleted || string(res.Record) != string(recordOf(key)) {
			t.Fatalf("%s in the old file: %s %v", key, res.State, err)
		}
	}
}

// The same for a batch's items: claimed in the old file, they keep it open
// until they are completed there, and a late batch claim takes it again.
func TestReloadKeepsTheOldFileForItsBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.db"), filepath.Join(dir, "second.db")
	old := provisionAt(t, first)
	running, late := []string{"batch:r0", "batch:r1", "batch:r2"}, []string{"batch:l0", "batch:l1"}
	records := func(keys []string) [][]byte {
		out := make([][]byte, len(keys))
		for i, k := range keys {
			out[i] = recordOf(k)
		}
		return out
	}
	owner := store.NewOwner()
	if res, err := old.ClaimBatch(t.Context(), running, owner, time.Minute, store.BatchUnlessInFlight); err != nil || res.Claimed != len(running) {
		t.Fatalf("batch claim: %d claimed, %v", res.Claimed, err)
	}
	moved := provisionAt(t, second)
	t.Cleanup(func() { _ = moved.Cleanup() })
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !fileHeld(t, first) {
		t.Fatal("the old file was closed under a batch claimed in it")
	}
	if err := old.RenewBatch(t.Context(), running, owner, time.Minute); err != nil {
		t.Fatalf("renewing the running batch: %v", err)
	}
	if err := old.CompleteBatch(t.Context(), running, owner, records(running), time.Hour); err != nil {
		t.Fatalf("the running batch's completion: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the old file closed after its last batch", func() bool { return !fileHeld(t, first) })

	if res, err := old.ClaimBatch(t.Context(), late, owner, time.Minute, store.BatchUnlessInFlight); err != nil || res.Claimed != len(late) {
		t.Fatalf("a late batch claim: %d claimed, %v", res.Claimed, err)
	}
	if !fileHeld(t, first) {
		t.Fatal("a late batch claim did not take the old file again")
	}
	if err := old.CompleteBatch(t.Context(), late, owner, records(late), time.Hour); err != nil {
		t.Fatalf("the late batch's completion: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the old file closed after the late batch", func() bool { return !fileHeld(t, first) })

	reopened := provisionAt(t, first)
	t.Cleanup(func() { _ = reopened.Cleanup() })
	all := append(append([]string(nil), running...), late...)
	res, err := reopened.ClaimBatch(t.Context(), all, store.NewOwner(), time.Minute, store.BatchUnlessInFlight)
	if err != nil || res.Completed != len(all) {
		t.Fatalf("the batches in the old file: %d of %d completed, %v", res.Completed, len(all), err)
	}
	for i, k := range all {
		if string(res.Items[i].Record) != string(recordOf(k)) {
			t.Fatalf("%s in the old file: record %q", k, res.Items[i].Record)
		}
	}
}
