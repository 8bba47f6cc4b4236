package filestore_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// The file store's own promises, beyond the contract: records survive a
// close and a kill -9, a file another process holds or a damaged file is a
// provision error that says what to do, and a full disk fails the
// completion without losing the claim's key for ever.

// The child process: the test binary run again with these variables set
// opens a store and completes keys, or holds the file, until killed.
const (
	envChild = "FILESTORE_TEST_CHILD" // "complete" or "hold"
	envPath  = "FILESTORE_TEST_PATH"
	envSync  = "FILESTORE_TEST_SYNC"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "complete":
		childComplete(os.Getenv(envPath), os.Getenv(envSync))
		return
	case "hold":
		childHold(os.Getenv(envPath))
		return
	}
	os.Exit(m.Run())
}

// provisioned opens a store outside a test (the child's).
func provisioned(path, syncMode string) *filestore.Store {
	cfgCtx, err := caddy.ProvisionContext(&caddy.Config{})
	if err != nil {
		panic(err)
	}
	ctx, _ := caddy.NewContext(cfgCtx)
	s := &filestore.Store{Path: path, Sync: syncMode}
	if err := s.Provision(ctx); err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	return s
}

// childComplete completes keys from 32 goroutines as fast as it can and
// prints each key once its Complete has returned, until it is killed.
func childComplete(path, syncMode string) {
	s := provisioned(path, syncMode)
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("kill:%d:%d", g, i)
				owner := store.NewOwner()
				if _, err := s.Claim(context.Background(), key, owner, time.Minute); err != nil {
					panic(err)
				}
				if err := s.Complete(context.Background(), key, owner, recordOf(key), time.Hour); err != nil {
					panic(err)
				}
				mu.Lock()
				fmt.Fprintln(out, "done", key)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// childHold opens the store, says so, and waits to be killed.
func childHold(path string) {
	provisioned(path, "")
	fmt.Println("holding")
	select {}
}

// recordOf is a record that names its key.
func recordOf(key string) []byte {
	hash := sha256.Sum256([]byte(key))
	return append(record.Encode(nil, 200, http.Header{"X-Key": {key}}, &hash), key...)
}

// startChild runs the test binary as a child process in mode and returns
// it with its output.
func startChild(t *testing.T, mode, path, syncMode string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envPath+"="+path, envSync+"="+syncMode)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewScanner(stdout)
}

func TestRecordsSurviveCloseAndReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	ctx, cancel := testkit.NewContext(t)
	s := &filestore.Store{Path: path}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("reopen:%d", i)
		owner := store.NewOwner()
		if _, err := s.Claim(t.Context(), keys[i], owner, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(t.Context(), keys[i], owner, recordOf(keys[i]), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// a key in flight at close is not kept: in-flight claims belong to the
	// process. The file stays open for it until its lease ends (a request
	// still running when its configuration is cleaned up completes in it)
	if _, err := s.Claim(t.Context(), "reopen:in-flight", store.NewOwner(), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Cleanup(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testkit.Eventually(t, 10*time.Second, "the file closed once the claim's lease ended", func() bool { return !fileHeld(t, path) })

	s2 := open(t, path, "")
	for _, key := range keys {
		res, err := s2.Claim(t.Context(), key, store.NewOwner(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res.State != store.StateCompleted || string(res.Record) != string(recordOf(key)) {
			t.Fatalf("%s after reopening: %s, record %q", key, res.State, res.Record)
		}
	}
	res, err := s2.Claim(t.Context(), "reopen:in-flight", store.NewOwner(), time.Minute)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("a key in flight at close, after reopening: %s, %v; want claimed", res.State, err)
	}
}

// TestKillDuringCompletions kills a process completing keys from 32
// goroutines (SIGKILL, mid-write) and checks that every key whose Complete
// returned before the kill is completed in the file, which opens sound.
func TestKillDuringCompletions(t *testing.T) {
	for _, syncMode := range []string{"always", "200ms"} {
		t.Run("sync "+syncMode, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "store.db")
			for round := range 3 {
				cmd, out := startChild(t, "complete", path, syncMode)
				var done []string
				killAt := 300 + rand.IntN(700)
				for out.Scan() {
					line := out.Text()
					key, ok := strings.CutPrefix(line, "done ")
					if !ok {
						t.Fatalf("child: %s", line)
					}
					done = append(done, key)
					if len(done) == killAt {
						_ = cmd.Process.Signal(syscall.SIGKILL)
						break
					}
				}
				_ = cmd.Wait()
				if len(done) < killAt {
					t.Fatalf("round %d: the child completed %d keys before it ended, want %d", round, len(done), killAt)
				}
				s := open(t, path, syncMode)
				for _, key := range done {
					res, err := s.Claim(t.Context(), key, store.NewOwner(), time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if res.State != store.StateCompleted || string(res.Record) != string(recordOf(key)) {
						t.Fatalf("round %d: %s, completed before the kill, is %s after it", round, key, res.State)
					}
				}
				if err := s.Cleanup(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestFileHeldByAnotherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "store.db")
	_, out := startChild(t, "hold", path, "")
	if !out.Scan() || out.Text() != "holding" {
		t.Fatalf("child did not open the store: %q", out.Text())
	}
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	start := time.Now()
	err := (&filestore.Store{Path: path}).Provision(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("provisioning on a file another process holds succeeded")
	}
	testkit.MustContain(t, err.Error(), path, "in use by another process", "own path", "redis store")
	// about a second (the lock's wait), not for ever; a loaded machine
	// may stretch it some
	if took > 10*time.Second {
		t.Fatalf("provisioning took %s to fail, want about a second", took)
	}
}

// TestDamagedFile: a file that is not a store, a store file truncated, one
// with pages overwritten, all fail provisioning with an error that names
// the path and the way out, and never crash the process.
func TestDamagedFile(t *testing.T) {
	t.Parallel()
	// a sound file with records, to damage
	sound := filepath.Join(t.TempDir(), "sound.db")
	s := open(t, sound, "")
	for i := range 2000 {
		key := fmt.Sprintf("damage:%d", i)
		owner := store.NewOwner()
		_, _ = s.Claim(t.Context(), key, owner, time.Minute)
		if err := s.Complete(t.Context(), key, owner, recordOf(key), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Cleanup(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sound)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := os.Getpagesize()
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(rand.IntN(256))
	}
	overwritten := append([]byte(nil), data...)
	for p := 3; p*pageSize < len(overwritten); p += 2 {
		copy(overwritten[p*pageSize:], garbage[:pageSize])
	}
	cases := map[string][]byte{
		"not a store":       []byte("this is not a bbolt file, but it is not empty either\n"),
		"random bytes":      garbage,
		"truncated":         data[:8*pageSize],
		"meta overwritten":  append(append([]byte(nil), garbage[:2*pageSize]...), data[2*pageSize:]...),
		"pages overwritten": overwritten,
	}
	for name, content := range cases {
		path := filepath.Join(t.TempDir(), "store.db")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := testkit.NewContext(t)
		err := (&filestore.Store{Path: path}).Provision(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: provisioning succeeded", name)
		}
		testkit.MustContain(t, err.Error(), path, "damaged", "move it aside")
	}
}

func TestUnwritableDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ro", "store.db")
	if err := os.Mkdir(filepath.Join(dir, "ro"), 0o500); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// root writes anywhere: a read-only mount stands in
		testkit.MountTmpfs(t, filepath.Join(dir, "ro"), "ro,size=64k")
	}
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	err := (&filestore.Store{Path: path}).Provision(ctx)
	if err == nil {
		t.Fatal("provisioning in a directory that cannot be written succeeded")
	}
	testkit.MustContain(t, err.Error(), path)
}

// TestDiskFull: once the disk is full a completion fails with an error
// that says so, the key is released (the provider's retry is processed
// again), nothing panics, and the store works again when there is room.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Fatal("TestDiskFull mounts a 512KiB tmpfs and needs root (make test in CI runs as root)")
	}
	testkit.MountTmpfs(t, dir, "size=512k")
	s := open(t, filepath.Join(dir, "store.db"), "")
	big := make([]byte, 64<<10)
	var failed error
	var failedKey string
	for i := 0; i < 64 && failed == nil; i++ {
		key := fmt.Sprintf("full:%d", i)
		owner := store.NewOwner()
		if _, err := s.Claim(t.Context(), key, owner, time.Minute); err != nil {
			t.Fatal(err)
		}
		hash := sha256.Sum256(big)
		rec := append(record.Encode(nil, 200, nil, &hash), big...)
		if err := s.Complete(t.Context(), key, owner, rec, time.Hour); err != nil {
			failed, failedKey = err, key
		}
	}
	if failed == nil {
		t.Fatal("64 completions of 64KiB each fit a 512KiB disk")
	}
	testkit.MustContain(t, failed.Error(), "no space left on device")
	owner := store.NewOwner()
	res, err := s.Claim(t.Context(), failedKey, owner, time.Minute)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("the key whose completion failed: %s, %v; want it released and claimed again", res.State, err)
	}
	// released, as its request would: the file closes with the store, and
	// the disk can be unmounted
	if err := s.Release(t.Context(), failedKey, owner); err != nil {
		t.Fatal(err)
	}
}
