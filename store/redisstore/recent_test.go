package redisstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The copy reads the real clock: its expiry is checked against the times
// before and after a put, and a copy's ttl is waited for.
func TestRecentRecordsBoundsAndExpiry(t *testing.T) {
	t.Parallel()
	rr := newRecentRecords()

	// a copy is served until its record's ttl, and not after
	const ttl = 300 * time.Millisecond
	start := time.Now()
	rr.put("short", []byte("s"), ttl)
	putEnd := time.Now()
	for deadline := start.Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		before := time.Now()
		rec, ok := rr.get("short")
		after := time.Now()
		if ok && string(rec) != "s" {
			t.Fatalf("copy of short: %q", rec)
		}
		if ok && !before.Before(putEnd.Add(ttl)) {
			t.Fatalf("a copy is served %v after it was put, past its record's ttl %v", before.Sub(putEnd), ttl)
		}
		if !ok {
			if after.Before(start.Add(ttl)) {
				t.Fatalf("a copy stopped being served %v after it was put, before its record's ttl %v", after.Sub(start), ttl)
			}
			break
		}
		if after.After(deadline) {
			t.Fatal("a copy is still served 10s after it was put with a ttl of 300ms")
		}
	}

	// a copy of a record with a longer ttl is served for recentMaxAge at
	// most (get serves a copy until its expiry, as above)
	start = time.Now()
	rr.put("long", []byte("l"), 48*time.Hour)
	putEnd = time.Now()
	if rec, ok := rr.get("long"); !ok || string(rec) != "l" {
		t.Fatalf("copy of long: %q, %v", rec, ok)
	}
	rr.mu.Lock()
	expires := time.Unix(0, rr.byKey["long"].expires)
	rr.mu.Unlock()
	if expires.Before(start.Add(recentMaxAge)) || expires.After(putEnd.Add(recentMaxAge)) {
		t.Fatalf("a copy with a ttl of 48h is served until %v after it was put, want recentMaxAge (%v)", expires.Sub(start), recentMaxAge)
	}

	rr.put("dropped", []byte("d"), time.Hour)
	rr.drop("dropped")
	if _, ok := rr.get("dropped"); ok {
		t.Fatal("a dropped copy is served")
	}

	// the oldest copies go first, by count
	for i := range recentMaxEntries + 10 {
		rr.put(fmt.Sprintf("k%d", i), []byte("r"), time.Hour)
	}
	if _, ok := rr.get("k9"); ok {
		t.Fatal("the oldest copy survived past recentMaxEntries")
	}
	if _, ok := rr.get(fmt.Sprintf("k%d", recentMaxEntries+9)); !ok {
		t.Fatal("the newest copy is missing")
	}
	if len(rr.byKey) != recentMaxEntries {
		t.Fatalf("%d copies kept, want %d", len(rr.byKey), recentMaxEntries)
	}

	// and by bytes
	big := make([]byte, recentMaxBytes/4)
	for i := range 6 {
		rr.put(fmt.Sprintf("big%d", i), big, time.Hour)
	}
	if rr.bytes > recentMaxBytes {
		t.Fatalf("%d bytes kept, bound %d", rr.bytes, recentMaxBytes)
	}
	if _, ok := rr.get("big5"); !ok {
		t.Fatal("the newest large copy is missing")
	}
	if _, ok := rr.get("big0"); ok {
		t.Fatal("the oldest large copy survived past recentMaxBytes")
	}
}

func TestKeepRecent(t *testing.T) {
	t.Parallel()
	s := &Store{client: &redisClient{recent: newRecentRecords()}}
	s.keepRecent(nil, []byte("done"), time.Hour, "a", "a-guard")
	s.keepRecent(errors.New("redis store: complete: i/o timeout"), []byte("answered"), time.Hour, "b")
	s.keepRecent(store.ErrNotOwner, []byte("theirs"), time.Hour, "c")
	for key, want := range map[string]string{"a": "done", "a-guard": "done", "b": "answered", "c": ""} {
		rec, ok := s.Recent(key)
		if string(rec) != want || ok != (want != "") {
			t.Errorf("copy of %s: %q, %v; want %q", key, rec, ok, want)
		}
	}
	s.forgetRecent("a")
	if _, ok := s.Recent("a"); ok {
		t.Fatal("forgetRecent left the copy")
	}
}

// A key put again is counted once, whichever of its slots goes first.
func TestRecentRecordsPutAgain(t *testing.T) {
	t.Parallel()
	rr := newRecentRecords()
	for range 3 {
		for i := range recentMaxEntries {
			rr.put(fmt.Sprintf("k%d", i%100), make([]byte, 10), time.Hour)
		}
	}
	if len(rr.byKey) != 100 || rr.bytes != 100*10 {
		t.Fatalf("%d copies of %d bytes, want 100 of 1000", len(rr.byKey), rr.bytes)
	}
}
