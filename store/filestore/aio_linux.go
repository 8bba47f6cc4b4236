//go:build linux

package filestore

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The log's fdatasync through Linux's asynchronous I/O. A goroutine in a
// blocking system call keeps its processor (Go's P, one of GOMAXPROCS)
// until the scheduler's monitor takes it back, and the monitor leaves it
// there for up to 10 ms while another processor is idle or looking for
// work. Under load the committer spends about 40 % of the time in the log's
// fdatasync (0.3 to 1 ms each, hundreds a second), so on a machine of two
// cores Caddy ran on one processor for much of the time while the other
// core idled: the machine was 11 to 13 % idle in the load test's F against
// 5 to 7 % without the disk (BENCHMARKS.md, "The committer's processor").
// Here the kernel runs the same fdatasync (IOCB_CMD_FDSYNC: vfs_fsync with
// datasync, what fdatasync(2) does) in one of its worker threads and
// signals an eventfd, which the committer waits on in Go's network poller,
// its processor free for the handlers meanwhile. Where the kernel has no
// asynchronous fdatasync (before 4.18) or refuses the calls (a seccomp
// profile, aio-max-nr reached), the log syncs with fdatasync(2) itself.

// Linux's aio ABI (include/uapi/linux/aio_abi.h).
const (
	iocbCmdFdsync = 3 // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 // IOCB_FLAG_RESFD
)

// iocb is struct iocb, its fields in the kernel's order; those an
// fdatasync leaves zero are blank (aio_data; aio_key and aio_rw_flags,
// whose order depends on the byte order; aio_reqprio; aio_buf,
// aio_nbytes, aio_offset and aio_reserved2).
type iocb struct {
	_      uint64
	_      uint32
	_      int32
	opcode uint16
	_      int16
	fildes uint32
	_      [4]uint64
	flags  uint32
	resfd  uint32
}

// ioEvent is struct io_event: aio_data and the iocb's address, then the
// result (a negative errno on failure) and a second one.
type ioEvent struct {
	_   [2]uint64
	res int64
	_   int64
}

// aioSyncer makes fdatasyncs one at a time through one aio context.
type aioSyncer struct {
	mu     sync.Mutex
	ctx    uintptr  // aio_context_t
	done   *os.File // an eventfd in Go's poller, signalled by each completion
	efd    int      // its descriptor
	buf    [8]byte
	off    bool   // closed, or the kernel refused an fdatasync: fdatasync(2) from then on
	synced uint64 // fdatasyncs made through aio (tests)
}

// newAIOSyncer returns an aioSyncer, or an error where the kernel has no
// aio for this process.
func newAIOSyncer() (*aioSyncer, error) {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &aioSyncer{ctx: ctx, done: os.NewFile(uintptr(efd), "aio-eventfd"), efd: efd}, nil
}

// fdatasync flushes f's data as fdatasync(2) does, waiting in the poller.
// It returns errNoAIO when the kernel would not take the request, f
// untouched.
func (s *aioSyncer) fdatasync(f *os.File) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return errNoAIO
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return errNoAIO
	}
	var submitErr unix.Errno
	if err := rc.Control(func(fd uintptr) {
		cb := iocb{opcode: iocbCmdFdsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(s.efd)}
		p := &cb
		n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, s.ctx, 1, uintptr(unsafe.Pointer(&p)))
		runtime.KeepAlive(p)
		switch {
		case e != 0:
			submitErr = e
		case n != 1:
			submitErr = unix.EAGAIN
		}
	}); err != nil || submitErr != 0 {
		if submitErr == unix.EINVAL || submitErr == unix.ENOSYS || submitErr == unix.EOPNOTSUPP {
			// a kernel before 4.18 has no IOCB_CMD_FDSYNC
			s.off = true
		}
		return errNoAIO
	}
	// the request is the kernel's now: its answer is waited for whatever
	// happens, so that no later write goes out before it is known
	_, readErr := s.done.Read(s.buf[:])
	var ev ioEvent
	for {
		// after the eventfd's signal the event is there; without it
		// (readErr), this waits for it in the system call
		n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, s.ctx, 1, 1, uintptr(unsafe.Pointer(&ev)), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			// the request's answer is not known: no other goes out
			// through this context
			s.off = true
			return fmt.Errorf("io_getevents: %w (eventfd: %v)", e, readErr)
		}
		if n == 1 {
			break
		}
	}
	if ev.res < 0 {
		return unix.Errno(-ev.res)
	}
	s.synced++
	return nil
}

// close releases the aio context and the eventfd.
func (s *aioSyncer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx == 0 {
		return
	}
	s.off = true
	_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, s.ctx, 0, 0)
	s.ctx = 0
	_ = s.done.Close()
}
