package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// A damaged file must be an error, never a crash: bbolt panics on a page
// it cannot read, and a page beyond the end of a truncated file is a fault
// of the memory map (SIGBUS), which kills the process unless the goroutine
// asked for a panic instead. So the file's meta pages are checked before
// bbolt maps it (a file shorter than what its meta page says it holds is
// refused), every page is read once at open, and every goroutine that reads
// the map turns faults into panics, which the store recovers as errors.

// bbolt's file format: a page header, then the meta of pages 0 and 1.
const (
	pageHeaderSize = 16
	metaSize       = 64 // through the checksum
	metaMagic      = 0xED0CDAED
	metaVersion    = 2
)

// preflight checks the meta pages of the file at path (which may not
// exist yet) against the file's size.
func preflight(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return nil // opening for writing says why
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	buf := make([]byte, pageHeaderSize+metaSize)
	readMeta := func(off int64) (pageSize, pgid, txid uint64, ok bool) {
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return 0, 0, 0, false
		}
		m := buf[pageHeaderSize:]
		le := binary.LittleEndian
		if le.Uint32(m[0:]) != metaMagic || le.Uint32(m[4:]) != metaVersion {
			return 0, 0, 0, false
		}
		h := fnv.New64a()
		h.Write(m[:56])
		if h.Sum64() != le.Uint64(m[56:]) {
			return 0, 0, 0, false
		}
		return uint64(le.Uint32(m[8:])), le.Uint64(m[40:]), le.Uint64(m[48:]), true
	}
	ps0, pgid0, tx0, ok0 := readMeta(0)
	step := ps0
	if !ok0 {
		step = uint64(os.Getpagesize())
	}
	_, pgid1, tx1, ok1 := readMeta(int64(step))
	var pageSize, pgid uint64
	switch {
	case ok0 && (!ok1 || tx0 >= tx1):
		pageSize, pgid = ps0, pgid0
	case ok1:
		pageSize, pgid = step, pgid1
	default:
		return errors.New("neither meta page is valid: not a store file, or overwritten")
	}
	if need := pgid * pageSize; uint64(fi.Size()) < need {
		return fmt.Errorf("the file holds %d bytes of the %d its meta page says it holds: truncated", fi.Size(), need)
	}
	return nil
}

// check reads every page of the file once, through every bucket's keys.
func check(b *bolt.DB) error {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return b.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			return walk(bk)
		})
	})
}

// walk reads every key and value of a bucket and its nested buckets.
func walk(bk *bolt.Bucket) error {
	c := bk.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if nested := bk.Bucket(k); nested != nil {
				if err := walk(nested); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
