package filestore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
)

// The log: with `sync always`, a completion is on disk once it is in the
// log, a file of its own beside the store's (`<path>.log`), written in
// place and synced with one fdatasync for every completion that waited
// while the last one was on its way to the disk. With `sync <interval>`
// the log is written at once and synced every interval. A commit of bbolt's tree
// costs two fdatasyncs in a row (its pages, then its meta page, so that the
// meta page never names a page that is not on disk) and writes every page
// on the path from each key to the root; the log costs one write and one
// fdatasync. The tree gets the same values later, in larger commits that
// no request waits for (commit.go): until then they are kept in memory
// (the shards' pending maps) and answered from there.
//
// The file is made logSize long once, with zeros written and synced, so
// that writing a record changes neither its size nor its blocks: an
// fdatasync then has only the record's blocks to write, no file system
// metadata. It is two segments of segSize, used in turn; in each, records
// follow each other from the segment's start:
//
//	u32 length of the payload, u32 CRC-32C of the sequence number and the
//	payload, u64 sequence number, payload: puts, each a kind byte, the
//	expiry (u64 unix nanoseconds), the key and the value (each a uvarint
//	length and its bytes).
//
// Sequence numbers grow by one from record to record. The tree keeps, in
// the commit that applies a record, the sequence number of the last record
// it holds (bucket `log`, key `applied`). When a record does not fit in
// what is left of its segment, it goes at the start of the other one, once
// the tree holds every record there (it does, long since: those records
// are a segment older, and the tree takes records within applyDelay, or
// once a quarter of a segment of them waits: commit.go). At
// open, each segment's records are read from its start while each is whole
// (its CRC) and follows the one before it (its sequence number; what an
// earlier pass left further on has smaller numbers, all held by the tree);
// those the tree does not hold yet are applied to it, as if just written.

// segSize is the size of each of the log's two segments. A record that
// does not fit in one (answers of more than about a MiB) is written to the
// tree directly, as it is with an interval.
const (
	segSize = 1 << 20
	logSize = 2 * segSize
)

const logHeader = 16

var (
	bucketLog  = []byte("log")
	keyApplied = []byte("applied")
	logCRC     = crc32.MakeTable(crc32.Castagnoli)
)

// put is one value a completion writes: a key's record, or a note.
type put struct {
	key     string
	kind    byte
	payload string
	expires int64 // unix nanoseconds
}

// logRecord is one record read from the log.
type logRecord struct {
	seq  uint64
	puts []put
}

// wal is the open log.
type wal struct {
	f       *os.File
	dirty   atomic.Bool // written since the last fdatasync
	path    string
	seg     int       // the segment written to
	off     int64     // where the next record goes, in seg
	segLast [2]uint64 // the sequence number of each segment's last record
	last    uint64    // the sequence number of the last record written or read
	buf     []byte
	// syncData is fdatasync; a test's model of a power loss replaces it
	syncData func(*os.File) error
	aio      *aioSyncer // nil where the kernel has no asynchronous fdatasync
}

// logPath is the path of the log of the store file at path.
func logPath(path string) string { return path + ".log" }

// openLog opens (or makes) the log of the store file at path, whose tree
// holds every record up to applied, and returns it with the records the
// tree does not hold yet. A log that cannot be made its full size (a disk
// almost full) is no log: nil, and completions go to the tree directly;
// the records it holds are returned all the same.
func openLog(path string, applied uint64) (*wal, []logRecord, error) {
	lp := logPath(path)
	f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("opening its log %s: %v", lp, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("reading its log %s: %v", lp, err)
	}
	l := &wal{path: lp, last: applied, buf: make([]byte, 0, 64<<10), syncData: fdatasync}
	var recs []logRecord
	for seg := range 2 {
		from := min(len(data), seg*segSize)
		all, end := parseLog(data[from:min(len(data), from+segSize)])
		if len(all) == 0 {
			continue
		}
		l.segLast[seg] = all[len(all)-1].seq
		if l.segLast[seg] > l.last {
			l.seg, l.off, l.last = seg, end, l.segLast[seg]
		}
		for _, r := range all {
			if r.seq > applied {
				recs = append(recs, r)
			}
		}
	}
	slices.SortFunc(recs, func(a, b logRecord) int { return cmp.Compare(a.seq, b.seq) })
	if len(data) < logSize {
		if err := fillLog(f, int64(len(data))); err != nil {
			// no room for the log: the store runs without one
			_ = f.Close()
			if len(recs) == 0 {
				_ = os.Remove(lp)
			}
			return nil, recs, nil
		}
	}
	l.f = f
	if s, err := newAIOSyncer(); err == nil {
		l.aio = s
		l.syncData = l.aioSync
	}
	return l, recs, nil
}

// errNoAIO is the answer of an aioSyncer that cannot sync (closed, or
// refused by the kernel): the log syncs with fdatasync(2).
var errNoAIO = errors.New("no asynchronous fdatasync")

// aioSync is the log's fdatasync through the aio syncer (aio_linux.go),
// or fdatasync(2) where the kernel does not take it.
func (l *wal) aioSync(f *os.File) error {
	err := l.aio.fdatasync(f)
	if err == errNoAIO {
		return fdatasync(f)
	}
	return err
}

// close closes the log's file.
func (l *wal) close() error {
	if l.aio != nil {
		l.aio.close()
	}
	return l.f.Close()
}

// fillLog writes zeros from `from` to logSize and syncs the file, and its
// directory when the file is new.
func fillLog(f *os.File, from int64) error {
	if _, err := f.WriteAt(make([]byte, logSize-from), from); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if from == 0 {
		if dir, err := os.Open(filepath.Dir(f.Name())); err == nil {
			_ = dir.Sync()
			_ = dir.Close()
		}
	}
	return nil
}

// parseLog returns the records of a log's bytes, read from the start while
// each is whole and follows the one before it, and where they end.
func parseLog(data []byte) ([]logRecord, int64) {
	var recs []logRecord
	off := 0
	for off+logHeader <= len(data) {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		seq := binary.LittleEndian.Uint64(data[off+8:])
		if n == 0 || n > len(data)-off-logHeader || seq == 0 {
			break
		}
		if len(recs) > 0 && seq != recs[len(recs)-1].seq+1 {
			break
		}
		body := data[off+8 : off+logHeader+n] // the sequence number and the payload
		if crc32.Checksum(body, logCRC) != sum {
			break
		}
		puts, ok := decodePuts(body[8:])
		if !ok {
			break
		}
		recs = append(recs, logRecord{seq: seq, puts: puts})
		off += logHeader + n
	}
	return recs, int64(off)
}

// encodePuts appends the payload of a record.
func encodePuts(b []byte, puts []put) []byte {
	for _, p := range puts {
		b = append(b, p.kind)
		b = binary.BigEndian.AppendUint64(b, uint64(p.expires))
		b = binary.AppendUvarint(b, uint64(len(p.key)))
		b = append(b, p.key...)
		b = binary.AppendUvarint(b, uint64(len(p.payload)))
		b = append(b, p.payload...)
	}
	return b
}

// decodePuts reads the payload of a record.
func decodePuts(b []byte) ([]put, bool) {
	var puts []put
	for len(b) > 0 {
		if len(b) < 9 {
			return nil, false
		}
		p := put{kind: b[0], expires: int64(binary.BigEndian.Uint64(b[1:]))}
		b = b[9:]
		for i, dst := range []*string{&p.key, &p.payload} {
			n, w := binary.Uvarint(b)
			if w <= 0 || n > uint64(len(b)-w) || (i == 0 && n == 0) {
				return nil, false
			}
			*dst = string(b[w : w+int(n)])
			b = b[w+int(n):]
		}
		puts = append(puts, p)
	}
	return puts, len(puts) > 0
}

// appendLog writes puts as the log's next record, and syncs it when sync
// is set, and returns the record's sequence number. When the record does not fit in
// what is left of its segment, it goes at the start of the other segment,
// once applied says the tree holds the records there (catchUp waits for
// that). Puts must fit in a segment (fits).
func (l *wal) appendLog(puts []put, sync bool, applied func() uint64, catchUp func(uint64) error) (uint64, error) {
	b := append(l.buf[:0], make([]byte, logHeader)...)
	b = encodePuts(b, puts)
	l.buf = b[:0]
	if l.off+int64(len(b)) > segSize {
		other := 1 - l.seg
		if applied() < l.segLast[other] {
			if err := catchUp(l.segLast[other]); err != nil {
				return 0, err
			}
		}
		l.seg, l.off = other, 0
	}
	seq := l.last + 1
	binary.LittleEndian.PutUint32(b, uint32(len(b)-logHeader))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], logCRC))
	if _, err := l.f.WriteAt(b, int64(l.seg)*segSize+l.off); err != nil {
		return 0, fmt.Errorf("writing its log %s: %w", l.path, err)
	}
	l.dirty.Store(true)
	if sync {
		if err := l.sync(); err != nil {
			return 0, err
		}
	}
	l.off += int64(len(b))
	l.last, l.segLast[l.seg] = seq, seq
	return seq, nil
}

// sync puts what was written to the log on disk.
func (l *wal) sync() error {
	l.dirty.Store(false)
	if err := l.syncData(l.f); err != nil {
		l.dirty.Store(true)
		return fmt.Errorf("syncing its log %s: %w", l.path, err)
	}
	return nil
}

// fits reports whether puts fit in a segment of the log.
func fits(puts []put) bool { return logHeader+putsSize(puts) <= segSize }

// putsSize is the most bytes puts take in a record of the log.
func putsSize(puts []put) int {
	n := 0
	for _, p := range puts {
		n += 9 + 2*binary.MaxVarintLen64 + len(p.key) + len(p.payload)
	}
	return n
}

// fdatasync flushes a file's data (and what is needed to read it back).
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

// readLogFile reads the records of the log of the store file at path that
// come after applied, without changing the file (Export's).
func readLogFile(path string, applied uint64) ([]logRecord, error) {
	data, err := os.ReadFile(logPath(path))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []logRecord
	for seg := range 2 {
		from := min(len(data), seg*segSize)
		all, _ := parseLog(data[from:min(len(data), from+segSize)])
		for _, r := range all {
			if r.seq > applied {
				recs = append(recs, r)
			}
		}
	}
	slices.SortFunc(recs, func(a, b logRecord) int { return cmp.Compare(a.seq, b.seq) })
	return recs, nil
}
