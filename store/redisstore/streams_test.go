package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// testAppendBatch appends an event to the stream keys[1], with args[1] as
// a field of its own, and returns its id.
var testAppendBatch = NewAppendBatchScript(`
local function append(keys, args, f)
	f[#f+1] = 'arg'
	f[#f+1] = args[1]
	return redis.call('XADD', keys[1], '*', unpack(f))
end
`)

// ClaimAndAppendBatch is one script call: each item whose key is absent
// gets its event appended (with its own keys, args and fields) and its key
// completed with its record; a completed key and one in flight are
// reported as they are and get no event; overlapping batches at once
// append each item exactly once.
func TestClaimAndAppendBatch(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	st := s.Streams()
	ctx := context.Background()
	owner := store.NewOwner()
	if _, err := s.Claim(ctx, "idem:b:done", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "idem:b:done", owner, testRecord("done"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "idem:b:busy", store.NewOwner(), time.Minute); err != nil {
		t.Fatal(err)
	}
	item := func(name, stream string) AppendItem {
		return AppendItem{Key: "idem:b:" + name, Record: testRecord(name), Keys: []string{stream}, Args: []any{"arg-" + name}, Event: []any{"name", name}}
	}
	// the script loaded first: a server that does not know it answers
	// EVALSHA with NOSCRIPT, then gets EVAL
	if _, _, err := st.ClaimAndAppendBatch(ctx, testAppendBatch, []AppendItem{item("warm", "warm")}, time.Hour); err != nil {
		t.Fatal(err)
	}
	items := []AppendItem{item("done", "s1"), item("busy", "s1"), item("new1", "s1"), item("new2", "s2"), item("new3", "s1")}
	before := scriptCalls(t, rc)[0]
	res, ids, err := st.ClaimAndAppendBatch(ctx, testAppendBatch, items, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := scriptCalls(t, rc)[0] - before; n != 1 {
		t.Fatalf("%d script calls for a batch of %d items, want 1", n, len(items))
	}
	want := []store.State{store.StateCompleted, store.StateInFlight, store.StateClaimed, store.StateClaimed, store.StateClaimed}
	for i, r := range res {
		if r.State != want[i] {
			t.Fatalf("%s: %s, want %s", items[i].Key, r.State, want[i])
		}
		if (r.State == store.StateClaimed) != (ids[i] != "") {
			t.Fatalf("%s: %s with id %q", items[i].Key, r.State, ids[i])
		}
	}
	if string(res[0].Record) != string(testRecord("done")) {
		t.Fatalf("the completed key's record: %q", res[0].Record)
	}
	idOf := map[string]string{"new1": ids[2], "new2": ids[3], "new3": ids[4]}
	streams := map[string][]string{}
	for _, stream := range []string{"s1", "s2"} {
		for _, m := range rc.XRange(ctx, stream, "-", "+").Val() {
			name, _ := m.Values["name"].(string)
			if m.ID != idOf[name] {
				t.Fatalf("%s's event has id %s, the call returned %q", name, m.ID, idOf[name])
			}
			streams[stream] = append(streams[stream], fmt.Sprint(name, " ", m.Values["arg"]))
		}
	}
	if got := fmt.Sprint(streams); got != "map[s1:[new1 arg-new1 new3 arg-new3] s2:[new2 arg-new2]]" {
		t.Fatalf("streams hold %s", got)
	}
	for _, name := range []string{"new1", "new2", "new3"} {
		if v := rc.Get(ctx, "idem:b:"+name).Val(); v != string(testRecord(name)) {
			t.Fatalf("%s holds %q, want its record", name, v)
		}
		if ttl := rc.PTTL(ctx, "idem:b:"+name).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("%s expires in %s, want at most an hour", name, ttl)
		}
	}

	// overlapping batches at once: 8 windows of 20 over 50 keys
	all := make([]AppendItem, 50)
	for i := range all {
		all[i] = item(fmt.Sprintf("overlap:%02d", i), "overlap")
	}
	claimed := make([]atomic.Int32, len(all))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			from := w * 30 / 7
			res, _, err := st.ClaimAndAppendBatch(ctx, testAppendBatch, all[from:from+20], time.Hour)
			if err != nil {
				errs <- err
				return
			}
			for i, r := range res {
				if r.State == store.StateClaimed {
					claimed[from+i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	appended := map[string]int{}
	for _, m := range rc.XRange(ctx, "overlap", "-", "+").Val() {
		appended[m.Values["name"].(string)]++
	}
	for i, it := range all {
		name := it.Key[len("idem:b:"):]
		if n := claimed[i].Load(); n != 1 || appended[name] != 1 {
			t.Fatalf("%s claimed %d times by the overlapping batches, appended %d times; want once each", name, n, appended[name])
		}
	}
}
