//go:build porting

package webhookidempotency

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRecentRecordsBoundsAndExpiry(t *testing.T) {
	clock := useFakeClock(t)
	rr := newRecentRecords()

	rr.put("short", []byte("s"), time.Minute)
	rr.put("long", []byte("l"), 48*time.Hour)
	clock.advance(time.Minute)
	if _, ok := rr.get("short"); ok {
		t.Fatal("a copy is served past its record's ttl")
	}
	clock.advance(recentMaxAge - time.Minute - time.Second)
	if rec, ok := rr.get("long"); !ok || string(rec) != "l" {
		t.Fatalf("copy within recentMaxAge: %q, %v", rec, ok)
	}
	clock.advance(time.Second)
	if _, ok := rr.get("long"); ok {
		t.Fatal("a copy is served longer than recentMaxAge after it was recorded")
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
	s := &RedisStore{client: &redisClient{recent: newRecentRecords()}}
	s.keepRecent(nil, []byte("done"), time.Hour, "a", "a-guard")
	s.keepRecent(errors.New("redis store: complete: i/o timeout"), []byte("answered"), time.Hour, "b")
	s.keepRecent(errNotOwner, []byte("theirs"), time.Hour, "c")
	for key, want := range map[string]string{"a": "done", "a-guard": "done", "b": "answered", "c": ""} {
		rec, ok := s.recent(key)
		if string(rec) != want || ok != (want != "") {
			t.Errorf("copy of %s: %q, %v; want %q", key, rec, ok, want)
		}
	}
	s.forgetRecent("a")
	if _, ok := s.recent("a"); ok {
		t.Fatal("forgetRecent left the copy")
	}
}

// A key put again is counted once, whichever of its slots goes first.
func TestRecentRecordsPutAgain(t *testing.T) {
	useFakeClock(t)
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
