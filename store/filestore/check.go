package filestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"syscall"
	"time"
)

// A damaged file must be an error, never a crash. bbolt panics on a page
// it cannot read; a page beyond the end of a truncated file is a fault of
// the memory map (SIGBUS), which kills the process unless the goroutine
// asked for a panic instead; and opening a file for writing, bbolt walks
// its tree on a goroutine of its own (go.etcd.io/bbolt v1.5.0,
// DB.freepages) that, once it has reported a damage, goes on reading pages
// after bbolt has let go of them: a data race, or a crash, that no recover
// reaches. So before bbolt opens the file, preflight reads it through a
// read-only mapping of its own, every read bounds-checked: its meta pages
// against its size, then every page its tree reaches, checked as bbolt
// checks them and more strictly, then the list of free pages a file closed
// with, which bbolt takes without checking it against the tree. A file it
// passes gives bbolt nothing to report; a file it refuses is never handed
// to bbolt. And
// every goroutine that reads bbolt's map later turns faults into panics,
// which the store recovers as errors.

// bbolt's file format (go.etcd.io/bbolt/internal/common): a page header,
// then the meta of pages 0 and 1, or the elements of a branch or leaf page;
// a bucket's value is its root page and sequence, then, for a bucket small
// enough to live in its parent's leaf, its page inline.
const (
	pageHeaderSize  = 16 // id, flags, count, overflow
	metaSize        = 64 // through the checksum
	metaMagic       = 0xED0CDAED
	metaVersion     = 2
	elementSize     = 16 // a branch's or a leaf's element
	bucketValueSize = 16 // root page, sequence
	branchPage      = 0x01
	leafPage        = 0x02
	freelistPage    = 0x10
	bucketElement   = 0x01
)

// errInUse is preflight's answer for a file another process holds.
var errInUse = errors.New("in use by another process")

// meta is what preflight reads of a meta page.
type meta struct{ pageSize, root, freelist, pgid, txid uint64 }

// parseMeta reads the meta page that page (its header, then at least
// metaSize bytes) holds, if it is one whose checksum matches.
func parseMeta(page []byte) (meta, bool) {
	b := page[pageHeaderSize:]
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != metaMagic || le.Uint32(b[4:]) != metaVersion {
		return meta{}, false
	}
	h := fnv.New64a()
	h.Write(b[:56])
	if h.Sum64() != le.Uint64(b[56:]) {
		return meta{}, false
	}
	return meta{uint64(le.Uint32(b[8:])), le.Uint64(b[16:]), le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:])}, true
}

// preflight checks the file at path (which may not exist yet) before bbolt
// maps it: a file another process holds is errInUse within lockTimeout;
// any other error is a damage.
func preflight(path string) (err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return nil // opening for writing says why
	}
	defer f.Close()
	// shared, as bbolt's read-only open: a writer holds the file
	// exclusively, and what it writes meanwhile is not a damage
	for deadline := time.Now().Add(lockTimeout); ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return errInUse
		}
		time.Sleep(50 * time.Millisecond)
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	buf := make([]byte, pageHeaderSize+metaSize)
	readMeta := func(off int64) (meta, bool) {
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return meta{}, false
		}
		return parseMeta(buf)
	}
	m0, ok0 := readMeta(0)
	step := m0.pageSize
	if !ok0 {
		step = uint64(os.Getpagesize())
	}
	m1, ok1 := readMeta(int64(step))
	var m meta
	switch {
	case ok0 && (!ok1 || m0.txid >= m1.txid):
		m = m0
	case ok1:
		m = m1
		m.pageSize = step
	default:
		return errors.New("neither meta page is valid: not a store file, or overwritten")
	}
	if m.pageSize < pageHeaderSize+elementSize || m.pageSize > 1<<20 {
		return fmt.Errorf("its meta page gives a page size of %d bytes", m.pageSize)
	}
	if need := m.pgid * m.pageSize; m.pgid > uint64(fi.Size()) || uint64(fi.Size()) < need {
		return fmt.Errorf("the file holds %d bytes of the %d its meta page says it holds: truncated", fi.Size(), need)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(m.pgid*m.pageSize), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mapping it to read its pages: %v", err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	// a page the file no longer holds (truncated meanwhile) is a fault
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading its pages: %v", p)
		}
	}()
	t := &tree{data: data, pageSize: m.pageSize, pages: m.pgid, seen: make([]uint64, m.pgid/64+1)}
	if _, err := t.node(m.root, nil, nil, nil); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		return t.freelist(m.freelist)
	}
	return nil
}

// noFreelist is the meta page's freelist page of a file that has none: one
// closed without it, or a crash left (the store writes it only at close).
const noFreelist = ^uint64(0)

// freelist checks the list of free pages a file closed with (page id),
// once the tree is read: no page of the tree, and none outside the file,
// is in it. bbolt takes the list as it is, and a page of the tree in it
// would be written over by the next commit.
func (t *tree) freelist(id uint64) error {
	buf, err := t.page(id)
	if err != nil {
		return fmt.Errorf("the list of free pages: %v", err)
	}
	le := binary.LittleEndian
	if flags := le.Uint16(buf[8:]); flags != freelistPage {
		return fmt.Errorf("page %d, the list of free pages, is not one (flags %#x)", id, flags)
	}
	first, count := uint64(pageHeaderSize), uint64(le.Uint16(buf[10:]))
	if count == 0xFFFF { // the count is the list's first element
		count, first = le.Uint64(buf[pageHeaderSize:]), pageHeaderSize+8
	}
	if count > (uint64(len(buf))-first)/8 {
		return fmt.Errorf("page %d, the list of free pages, does not hold its %d pages", id, count)
	}
	for i := range count {
		free := le.Uint64(buf[first+i*8:])
		if free < 2 || free >= t.pages {
			return fmt.Errorf("the list of free pages holds page %d, outside the file's %d pages", free, t.pages)
		}
		if t.seen[free/64]&(1<<(free%64)) != 0 {
			return fmt.Errorf("the list of free pages holds page %d, which is in use", free)
		}
	}
	return nil
}

// tree reads the pages of a store file's tree once each, from its root:
// every page in the file, of a branch's or a leaf's type, reached once
// (its overflow pages too), its elements and their keys and values within
// it, and its keys in order, within the bounds its parent gives them.
type tree struct {
	data     []byte // the file, mapped
	pageSize uint64
	pages    uint64   // how many the file holds, by its meta page
	seen     []uint64 // a bit per page reached
}

// page returns page id and its overflow pages.
func (t *tree) page(id uint64) ([]byte, error) {
	if id < 2 || id >= t.pages {
		return nil, fmt.Errorf("page %d is outside the file's %d pages", id, t.pages)
	}
	buf := t.data[id*t.pageSize:]
	if got := binary.LittleEndian.Uint64(buf); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(binary.LittleEndian.Uint32(buf[12:]))
	if overflow >= t.pages-id {
		return nil, fmt.Errorf("page %d runs %d pages past the file's %d", id, overflow, t.pages)
	}
	for p := id; p <= id+overflow; p++ {
		if t.seen[p/64]&(1<<(p%64)) != 0 {
			return nil, fmt.Errorf("page %d is reached twice", p)
		}
		t.seen[p/64] |= 1 << (p % 64)
	}
	return buf[:(overflow+1)*t.pageSize], nil
}

// node checks page id (or, for id 0, the inline page) and the pages below
// it: its keys at least low (the first may equal it) and below high, either
// nil for no bound; it returns the largest key below it.
func (t *tree) node(id uint64, inline, low, high []byte) (last []byte, err error) {
	buf := inline
	if id != 0 {
		if buf, err = t.page(id); err != nil {
			return nil, err
		}
	} else if len(buf) < pageHeaderSize {
		return nil, errors.New("an inline bucket's page is shorter than its header")
	}
	le := binary.LittleEndian
	flags, count := le.Uint16(buf[8:]), uint64(le.Uint16(buf[10:]))
	if flags != branchPage && flags != leafPage {
		return nil, fmt.Errorf("page %d is neither a branch nor a leaf (flags %#x)", id, flags)
	}
	if pageHeaderSize+count*elementSize > uint64(len(buf)) {
		return nil, fmt.Errorf("page %d: %d elements do not fit in it", id, count)
	}
	// span returns buf[from:from+n], or nil when it is not within buf
	span := func(from, n uint64) []byte {
		if from > uint64(len(buf)) || n > uint64(len(buf))-from {
			return nil
		}
		return buf[from : from+n]
	}
	prev := low
	for i := range count {
		e := pageHeaderSize + i*elementSize
		pos, ksize := uint64(le.Uint32(buf[e+4:])), uint64(le.Uint32(buf[e+8:]))
		if flags == branchPage {
			pos, ksize = uint64(le.Uint32(buf[e:])), uint64(le.Uint32(buf[e+4:]))
		}
		key := span(e+pos, ksize)
		if key == nil {
			return nil, fmt.Errorf("page %d: the key of element %d lies outside the page", id, i)
		}
		switch {
		case i == 0 && prev != nil && bytes.Compare(prev, key) > 0,
			i > 0 && bytes.Compare(prev, key) >= 0,
			high != nil && bytes.Compare(key, high) >= 0:
			return nil, fmt.Errorf("page %d: key %d is out of order", id, i)
		}
		if flags == branchPage {
			upper := high
			if i+1 < count {
				n := pageHeaderSize + (i+1)*elementSize
				if upper = span(n+uint64(le.Uint32(buf[n:])), uint64(le.Uint32(buf[n+4:]))); upper == nil {
					return nil, fmt.Errorf("page %d: the key of element %d lies outside the page", id, i+1)
				}
			}
			if prev, err = t.node(le.Uint64(buf[e+8:]), nil, key, upper); err != nil {
				return nil, err
			}
			continue
		}
		prev = key
		value := span(e+pos+ksize, uint64(le.Uint32(buf[e+12:])))
		if value == nil {
			return nil, fmt.Errorf("page %d: the value of element %d lies outside the page", id, i)
		}
		if le.Uint32(buf[e:])&bucketElement == 0 {
			continue
		}
		if len(value) < bucketValueSize {
			return nil, fmt.Errorf("page %d: the bucket of element %d is %d bytes", id, i, len(value))
		}
		if root := le.Uint64(value); root != 0 {
			_, err = t.node(root, nil, nil, nil)
		} else {
			_, err = t.node(0, value[bucketValueSize:], nil, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	return prev, nil
}
