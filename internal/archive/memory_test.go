package archive

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// fakeClock replaces the package clock for one test. Tests that use it
// must not run in parallel, and no archive's queue may be appending while
// the clock is swapped (the queue reads it).
type fakeClock struct{ nanos atomic.Int64 }

func useFakeClock(t *testing.T) *fakeClock {
	t.Helper()
	c := &fakeClock{}
	c.nanos.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	prev := now
	now = func() time.Time { return time.Unix(0, c.nanos.Load()) }
	t.Cleanup(func() { now = prev })
	return c
}

func (c *fakeClock) advance(d time.Duration) { c.nanos.Add(int64(d)) }

// TestArchiveRing: the ring keeps the newest max_events in order, numbers
// events like a stream (one millisecond, several events), drops what is
// older than retention, and keeps the newest when its bound shrinks.
func TestArchiveRing(t *testing.T) {
	clock := useFakeClock(t)
	r := new(archiveRing)
	r.setMax(4)
	ids := func() []string {
		m := &memoryBackend{ring: r, retention: time.Hour}
		evs, err := m.page(context.Background(), event.MaxID, event.MinID, 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Key)
		}
		return out
	}
	add := func(key string) {
		r.add(&Entry{Request: event.Request{Key: key, Received: now()}}, time.Hour)
	}
	for i := range 3 {
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k2 k1 k0" {
		t.Fatalf("ring: %s", got)
	}
	if r.at(0).id.Seq != 0 || r.at(2).id.Seq != 2 || r.at(0).id.MS != r.at(2).id.MS {
		t.Fatalf("ids within one millisecond: %v %v", r.at(0).id, r.at(2).id)
	}
	for i := 3; i < 7; i++ {
		clock.advance(time.Millisecond)
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k6 k5 k4 k3" {
		t.Fatalf("full ring: %s", got)
	}
	// retention: everything but the newest is older than an hour
	clock.advance(time.Hour + time.Millisecond)
	add("k7")
	if got := strings.Join(ids(), " "); got != "k7" {
		t.Fatalf("after retention: %s", got)
	}
	// the ring wraps after a trim, and grows back
	for i := 8; i < 12; i++ {
		add(fmt.Sprint("k", i))
	}
	if got := strings.Join(ids(), " "); got != "k11 k10 k9 k8" {
		t.Fatalf("after wrapping: %s", got)
	}
	r.setMax(2)
	if got := strings.Join(ids(), " "); got != "k11 k10" {
		t.Fatalf("after shrinking: %s", got)
	}
	r.setMax(8)
	add("k12")
	if got := strings.Join(ids(), " "); got != "k12 k11 k10" {
		t.Fatalf("after growing: %s", got)
	}
}
