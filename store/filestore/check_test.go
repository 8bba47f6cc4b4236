package filestore

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// TestDamagedTreeIsRefusedBeforeBbolt: a file whose tree bbolt's own walk
// at open would find damaged (a page reached twice, a page beyond the
// file, keys out of order, a page of the wrong type) is refused as damaged,
// naming what is wrong, without bbolt ever walking it: bbolt reports such
// a damage from a goroutine that goes on reading after bbolt has let go of
// the pages, which the race detector (make test) reports and which can
// crash the process. The sound file it was made from opens, every key in
// it.
func TestDamagedTreeIsRefusedBeforeBbolt(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	want := completeKeys(t, d, "tree", 3000, 4, 100)
	waitApplied(t, d)
	// copied while open, as a crash leaves it: without the list of free
	// pages a close writes, so that bbolt walks the tree to rebuild it
	sound, err := os.ReadFile(copyFiles(t, d))
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	pageSize, root, pages, freelist := metaOf(t, sound)
	if freelist != noFreelist {
		t.Fatalf("the copy's meta page gives a list of free pages (page %d): bbolt would not walk its tree", freelist)
	}
	page := func(id uint64) []byte { return sound[id*pageSize : (id+1)*pageSize] }
	// the records bucket's root: a branch page, its keys being many
	var branch uint64
	for i := range uint64(le.Uint16(page(root)[10:])) {
		e := pageHeaderSize + i*elementSize
		p := page(root)
		if pos, ksize := uint64(le.Uint32(p[e+4:])), uint64(le.Uint32(p[e+8:])); bytes.Equal(p[e+pos:e+pos+ksize], bucketRecords) {
			branch = le.Uint64(p[e+pos+ksize:])
		}
	}
	if branch == 0 || le.Uint16(page(branch)[8:]) != branchPage || le.Uint16(page(branch)[10:]) < 2 {
		t.Fatalf("the records bucket's root (page %d) is not a branch of two elements or more", branch)
	}
	child := func(i uint64) uint64 { return le.Uint64(page(branch)[pageHeaderSize+i*elementSize+8:]) }
	leaf := child(0)
	for le.Uint16(page(leaf)[8:]) == branchPage {
		leaf = le.Uint64(page(leaf)[pageHeaderSize+8:])
	}
	if le.Uint16(page(leaf)[8:]) != leafPage || le.Uint16(page(leaf)[10:]) < 2 {
		t.Fatalf("page %d is not a leaf of two elements or more", leaf)
	}

	cases := []struct {
		name, says string
		damage     func(file []byte)
	}{
		{"a page reached twice", "reached twice", func(file []byte) {
			le.PutUint64(file[branch*pageSize+pageHeaderSize+elementSize+8:], child(0))
		}},
		{"a page beyond the file", "outside the file", func(file []byte) {
			le.PutUint64(file[branch*pageSize+pageHeaderSize+elementSize+8:], pages+100)
		}},
		{"two equal keys", "out of order", func(file []byte) {
			// element 1's key is element 0's: its offset is from itself
			p := file[leaf*pageSize:]
			e0, e1 := pageHeaderSize, pageHeaderSize+elementSize
			le.PutUint32(p[e1+4:], le.Uint32(p[e0+4:])-elementSize)
			le.PutUint32(p[e1+8:], le.Uint32(p[e0+8:]))
		}},
		{"a freelist page in the tree", "neither a branch nor a leaf", func(file []byte) {
			le.PutUint16(file[leaf*pageSize+8:], 0x10)
		}},
	}
	for _, c := range cases {
		file := bytes.Clone(sound)
		c.damage(file)
		path := filepath.Join(t.TempDir(), "store.db")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := openDB(path, zap.NewNop())
		if err == nil {
			_ = d.Destruct()
			t.Fatalf("%s: the file opened", c.name)
		}
		for _, s := range []string{path, "is damaged", c.says, "move it aside"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.name, err, s)
			}
		}
	}

	path := filepath.Join(t.TempDir(), "store.db")
	if err := os.WriteFile(path, sound, 0o600); err != nil {
		t.Fatal(err)
	}
	checkCompleted(t, openTest(t, path), want)
}

// metaOf returns the page size, the root page, the page count and the
// page of the list of free pages the latest meta page of a store file
// gives.
func metaOf(t *testing.T, file []byte) (pageSize, root, pages, freelist uint64) {
	t.Helper()
	var latest meta
	for _, off := range []int{0, os.Getpagesize()} {
		m, ok := parseMeta(file[off:])
		if !ok {
			t.Fatalf("no meta page at %d", off)
		}
		if m.txid >= latest.txid {
			latest = m
		}
	}
	return latest.pageSize, latest.root, latest.pgid, latest.freelist
}

// TestFlippedBytesAreRefusedOrHarmless: bytes of the pages a crash-left
// file's tree reaches, changed at random (a fixed seed), make the file
// either refused as damaged or opened, never a crash: whatever preflight
// lets through, bbolt's own walk at open finds nothing wrong with. A
// store opened that way answers a claim.
func TestFlippedBytesAreRefusedOrHarmless(t *testing.T) {
	t.Parallel()
	d := openTest(t, filepath.Join(t.TempDir(), "store.db"))
	completeKeys(t, d, "flip", 2000, 4, 100)
	waitApplied(t, d)
	sound, err := os.ReadFile(copyFiles(t, d))
	if err != nil {
		t.Fatal(err)
	}
	pageSize, _, pages, _ := metaOf(t, sound)
	rng := rand.New(rand.NewPCG(42, 42))
	refused, opened := 0, 0
	for range 300 {
		file := bytes.Clone(sound)
		// a few bytes of one page, in its header and elements mostly
		page := 2 + rng.Uint64N(pages-2)
		for range 1 + rng.IntN(3) {
			off := page*pageSize + rng.Uint64N(min(pageSize, 256))
			file[off] ^= byte(1 + rng.IntN(255))
		}
		path := filepath.Join(t.TempDir(), "store.db")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := openDB(path, zap.NewNop())
		if err != nil {
			if !strings.Contains(err.Error(), "is damaged") {
				t.Fatalf("page %d changed: %v, want it refused as damaged", page, err)
			}
			refused++
			continue
		}
		opened++
		_, _, _ = d.claim("flip:new", "", store.NewOwner(), time.Minute, 0, claimPlain, nil)
		if err := d.Destruct(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d refused, %d opened", refused, opened)
	if refused == 0 {
		t.Fatal("no changed file was refused: the changes missed the tree")
	}
}

// TestFreelistHoldingATreePageIsRefused: a file closed with its list of
// free pages, the list naming a page of the tree, is refused as damaged:
// bbolt takes the list as it is, and its next commit would write over
// that page. The same file with the list sound opens.
func TestFreelistHoldingATreePageIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := openTest(t, filepath.Join(dir, "store.db"))
	want := completeKeys(t, d, "free", 500, 4, 100)
	waitApplied(t, d)
	closeTest(t, d)
	sound, err := os.ReadFile(filepath.Join(dir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	pageSize, root, _, freelist := metaOf(t, sound)
	if freelist == noFreelist {
		t.Fatal("the file closed without its list of free pages")
	}
	le := binary.LittleEndian
	file := bytes.Clone(sound)
	list := file[freelist*pageSize:]
	le.PutUint16(list[10:], 1)
	le.PutUint64(list[pageHeaderSize:], root)
	path := filepath.Join(t.TempDir(), "store.db")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	if d, err := openDB(path, zap.NewNop()); err == nil {
		_ = d.Destruct()
		t.Fatal("the file opened")
	} else if !strings.Contains(err.Error(), "is damaged (the list of free pages holds page") {
		t.Fatalf("%v, want it refused as damaged, naming the list of free pages", err)
	}
	if err := os.WriteFile(path, sound, 0o600); err != nil {
		t.Fatal(err)
	}
	checkCompleted(t, openTest(t, path), want)
}
