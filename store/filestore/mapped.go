package filestore

import (
	"sync/atomic"
	"syscall"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// The file's pages in the process's resident set. bbolt reads the file
// through a shared, read-only mapping: a page read stays mapped into the
// process until the kernel needs the memory back. They are the page
// cache's pages, not the process's, but they count in its resident set,
// and large values read them by the megabyte: a large record read for a
// replay, and the leaf a large record sits in, copied whole when a
// neighbour is written. 1,500 records of 900 KB left 440 MB of the file
// resident after they were written and 1.4 GB after each was replayed.
// After every mappedBudget of large values read or pages written, the
// mapping's pages are handed back (madvise MADV_DONTNEED: a later read
// finds the page in the page cache again, a minor fault), so a store of
// large records stays about as resident as one of small records
// (docs/stores.md, "Fast duplicates").

// mappedBudget is how much the process reads and writes of large values
// before it hands the file's pages back.
const mappedBudget = 64 << 20

// mapped counts what may have made the file's pages resident since they
// were last handed back.
type mapped struct {
	bytes atomic.Int64
	kick  chan struct{} // to mappedLoop
}

// touched counts n bytes of the file read or written; past mappedBudget,
// mappedLoop hands the pages back.
func (d *db) touched(n int) {
	if d.mapped.bytes.Add(int64(n)) >= mappedBudget {
		signal(d.mapped.kick)
	}
}

// mappedLoop hands the file's pages back when kicked, until the file
// closes.
func (d *db) mappedLoop() {
	defer d.done.Done()
	for {
		select {
		case <-d.stop:
			return
		case <-d.mapped.kick:
		}
		d.mapped.bytes.Store(0)
		// in a read transaction: bbolt does not map the file again
		// (when it grows) while one is open
		err := d.view(func(tx *bolt.Tx) error {
			info := d.bolt.Info()
			_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, info.Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
			if errno != 0 {
				return errno
			}
			return nil
		})
		if err != nil {
			d.logger.Debug("file store: handing the file's pages back failed", zap.String("path", d.path), zap.Error(err))
		}
	}
}
