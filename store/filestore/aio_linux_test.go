//go:build linux

package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// testSyncer returns an aio syncer, closed when the test ends; a kernel
// that takes no aio fails the test (the machines this project runs on
// have it).
func testSyncer(t *testing.T) *aioSyncer {
	t.Helper()
	s, err := newAIOSyncer()
	if err != nil {
		t.Fatalf("this machine's kernel takes no aio: %v", err)
	}
	t.Cleanup(s.close)
	return s
}

// TestAIOSyncerSyncsThroughTheKernel: the kernel takes the log's
// fdatasyncs as asynchronous requests and answers each; once closed, the
// syncer takes none, and the log syncs with fdatasync(2).
func TestAIOSyncerSyncsThroughTheKernel(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := testSyncer(t)
	for i := range 3 {
		if _, err := f.WriteAt([]byte(fmt.Sprintf("record %d\n", i)), int64(i*9)); err != nil {
			t.Fatal(err)
		}
		if err := s.fdatasync(f); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if s.synced != 3 {
		t.Fatalf("%d fdatasyncs answered through aio, want 3", s.synced)
	}
	// the wait is in Go's poller only while the eventfd stays non-blocking
	// (a read of a blocking one holds a processor as fdatasync(2) does; and
	// os.File.Fd makes blocking a descriptor that os.NewFile made
	// non-blocking itself)
	if flags, err := unix.FcntlInt(uintptr(s.efd), unix.F_GETFL, 0); err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("the eventfd's flags after three syncs: %#x %v, want O_NONBLOCK", flags, err)
	}
	s.close()
	s.close() // twice is harmless
	if err := s.fdatasync(f); !errors.Is(err, errNoAIO) {
		t.Fatalf("a closed syncer answered %v, want errNoAIO", err)
	}
	l := &wal{f: f, aio: s}
	l.syncData = l.aioSync
	if err := l.sync(); err != nil {
		t.Fatalf("the log's sync with its syncer closed: %v, want fdatasync(2)'s nil", err)
	}
}

// TestAIOSyncerNeverHidesARefusal: a file the kernel cannot sync (a
// character device has no fsync) is refused, and the log's sync returns
// fdatasync(2)'s error, not a success; the syncer then leaves every sync
// to fdatasync(2), as on a kernel without asynchronous fdatasync.
func TestAIOSyncerNeverHidesARefusal(t *testing.T) {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := testSyncer(t)
	l := &wal{f: f, aio: s, path: "/dev/null"}
	l.syncData = l.aioSync
	err = l.sync()
	if err == nil {
		t.Fatal("the sync of /dev/null succeeded, want the kernel's refusal")
	}
	if want := fdatasync(f); want == nil || !errors.Is(err, want) {
		t.Fatalf("the sync of /dev/null: %v, want fdatasync(2)'s error %v", err, want)
	}
	if !s.off || s.synced != 0 {
		t.Fatalf("after the refusal: off %v, synced %d, want the syncer off and nothing synced", s.off, s.synced)
	}
}

// TestCompletionsAreSyncedThroughAIO: with `sync always`, the store's
// log is synced through the aio syncer, and what it answered is in the
// file after a reopen.
func TestCompletionsAreSyncedThroughAIO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	d := openTest(t, path)
	if d.log == nil || d.log.aio == nil {
		t.Fatal("the log has no aio syncer on Linux")
	}
	answered := map[string]string{}
	for i := range 20 {
		key := fmt.Sprintf("aio:%02d", i)
		owner := store.NewOwner()
		if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
			t.Fatalf("claim %s: %s %v", key, res.State, err)
		}
		rec := "\x01" + key
		if err := d.complete(context.Background(), key, "", owner, []byte(rec), time.Hour, nil); err != nil {
			t.Fatalf("complete %s: %v", key, err)
		}
		answered[key] = rec
	}
	d.log.aio.mu.Lock()
	synced := d.log.aio.synced
	d.log.aio.mu.Unlock()
	if synced == 0 {
		t.Fatal("no completion was synced through aio")
	}
	checkCompleted(t, openTest(t, copyFiles(t, d)), answered)
}

// TestAIOStructsMatchTheKernelsABI: struct iocb and struct io_event as
// include/uapi/linux/aio_abi.h lays them out (the same on every Linux
// architecture: the fields are of fixed size).
func TestAIOStructsMatchTheKernelsABI(t *testing.T) {
	var cb iocb
	var ev ioEvent
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(struct iocb)", unsafe.Sizeof(cb), 64},
		{"offsetof(aio_lio_opcode)", unsafe.Offsetof(cb.opcode), 16},
		{"offsetof(aio_fildes)", unsafe.Offsetof(cb.fildes), 20},
		{"offsetof(aio_flags)", unsafe.Offsetof(cb.flags), 56},
		{"offsetof(aio_resfd)", unsafe.Offsetof(cb.resfd), 60},
		{"sizeof(struct io_event)", unsafe.Sizeof(ev), 32},
		{"offsetof(res)", unsafe.Offsetof(ev.res), 16},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
