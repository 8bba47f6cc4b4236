package inbox

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// batchItem is the item key of a request, in group ("" for none).
func batchItem(ib *Inbox, key, group string) BatchItem {
	body := []byte(`{"id":"` + key + `"}`)
	hash := sha256.Sum256(body)
	headers := "Content-Type: application/json\r\n"
	if group != "" {
		headers += groupHeader + ": " + group + "\r\n"
	}
	ev := &event.Request{Source: ib.Source(), Key: key, StoreKey: "idem:" + ib.Source() + ":" + key, Method: "POST", URI: "/hook",
		Headers: headers, Body: body, Received: time.Now()}
	return BatchItem{Claim: store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, BodyHash: &hash, Event: ev}
}

// scriptCalls returns the script calls (EVALSHA and EVAL) a Redis server
// has run.
func scriptCalls(tb testing.TB, c *redis.Client) int64 {
	cmds := testkit.RedisCommands(tb, c)
	return cmds["evalsha"] + cmds["eval"]
}

// A request's items are accepted in one round trip where the store allows
// it (the file store's one commit, one script on standalone Redis), each
// as Accept would: a completed key and one in flight are reported as they
// are and stored nowhere, each new item is an event of its own, in its
// group's order, delivered once; offered again, every item is a
// duplicate. On Redis Cluster, whose keys are on several masters, each
// item is accepted in its own round trip, with the same outcome.
func TestAcceptBatch(t *testing.T) {
	t.Parallel()
	type backend struct {
		open    func(t *testing.T) store.Store
		scripts *redis.Client // the server to count script calls on, nil for none
	}
	standalone := testkit.StartRedis(t)
	backends := map[string]backend{
		"file": {open: func(t *testing.T) store.Store {
			s, closeStore := openFileStore(t, filepath.Join(t.TempDir(), "store.db"))
			t.Cleanup(closeStore)
			return s
		}},
		"redis": {open: func(t *testing.T) store.Store { return openRedisStore(t, standalone.Addr()) }, scripts: standalone.Client(t)},
		"cluster": {open: func(t *testing.T) store.Store {
			return openRedisStore(t, testkit.StartCluster(t).Addrs()...)
		}},
	}
	for name, b := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			app := newRecorder(t, func(string, int) int { return http.StatusOK })
			s := b.open(t)
			source := "batch_" + name
			ib := newOrderedInbox(t, s, source, app.URL, nil)
			acceptIn(t, ib, "done", "")
			if r, err := s.Claim(t.Context(), "idem:"+source+":busy", store.NewOwner(), time.Minute); err != nil || r.State != store.StateClaimed {
				t.Fatalf("holding busy: %s %v", r.State, err)
			}
			if b.scripts != nil {
				// the script loaded first: a server that does not know it
				// answers EVALSHA with NOSCRIPT, then gets EVAL
				if _, err := ib.AcceptBatch(t.Context(), []BatchItem{batchItem(ib, "warm", "")}); err != nil {
					t.Fatal(err)
				}
			}
			keys := []string{"done", "busy", "a1", "b1", "a2", "u1"}
			groups := []string{"", "", "A", "B", "A", ""}
			offer := func() []store.ClaimResult {
				items := make([]BatchItem, len(keys))
				for i, k := range keys {
					items[i] = batchItem(ib, k, groups[i])
				}
				var before int64
				if b.scripts != nil {
					before = scriptCalls(t, b.scripts)
				}
				res, err := ib.AcceptBatch(t.Context(), items)
				if err != nil {
					t.Fatal(err)
				}
				if b.scripts != nil {
					if n := scriptCalls(t, b.scripts) - before; n != 1 {
						t.Fatalf("%d script calls to accept %d items, want 1", n, len(items))
					}
				}
				return res
			}
			check := func(what string, res []store.ClaimResult, want ...store.State) {
				t.Helper()
				for i, r := range res {
					if r.State != want[i] {
						t.Fatalf("%s: %s is %s, want %s", what, keys[i], r.State, want[i])
					}
				}
			}
			check("first offer", offer(), store.StateCompleted, store.StateInFlight, store.StateClaimed, store.StateClaimed, store.StateClaimed, store.StateClaimed)
			check("offered again", offer(), store.StateCompleted, store.StateInFlight, store.StateCompleted, store.StateCompleted, store.StateCompleted, store.StateCompleted)
			ib.Start()
			want := []string{"a1", "a2", "b1", "done", "u1"}
			if b.scripts != nil {
				want = append(want, "warm")
			}
			testkit.Eventually(t, 30*time.Second, "every event delivered", func() bool {
				got := app.delivered()
				slices.Sort(got)
				return slices.Equal(got, want)
			})
			time.Sleep(200 * time.Millisecond) // a second delivery of any would show by now
			got := app.delivered()
			if a := of(got, "a"); !slices.Equal(a, []string{"a1", "a2"}) {
				t.Fatalf("group A delivered as %v, want a1 then a2", a)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v each once", got, want)
			}
		})
	}
}

// A request of the most items a batch takes (store.MaxBatchKeys), in
// seven order_by groups, is accepted whole by the one call of the file
// store and of standalone Redis: every item an event, counted pending.
func TestAcceptBatchOfMaxItems(t *testing.T) {
	t.Parallel()
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ib := newOrderedInbox(t, open(t), "batch_max_"+name, "http://127.0.0.1:9", nil)
			items := make([]BatchItem, store.MaxBatchKeys)
			for i := range items {
				items[i] = batchItem(ib, fmt.Sprintf("item%04d", i), fmt.Sprint("g", i%7))
			}
			res, err := ib.AcceptBatch(t.Context(), items)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.State != store.StateClaimed {
					t.Fatalf("item %d: %s, want claimed", i, r.State)
				}
			}
			c, err := ib.Counts(t.Context())
			if err != nil || c.Pending != store.MaxBatchKeys {
				t.Fatalf("counts %+v %v, want %d events waiting", c, err, store.MaxBatchKeys)
			}
		})
	}
}

// Items accepted one by one are parted in lanes so that two items sharing
// a group at a destination are accepted in their order, one after the
// other, the sharing carried through any destination.
func TestOrderedLanes(t *testing.T) {
	q1, q2 := &fileQueue{}, &fileQueue{}
	in := func(pairs ...any) acceptance {
		var a acceptance
		for i := 0; i < len(pairs); i += 2 {
			a.to = append(a.to, admission{q: pairs[i].(queue), group: pairs[i+1].(string)})
		}
		return a
	}
	acc := []acceptance{
		in(q1, "A"),          // 0
		in(q1, ""),           // 1: no group
		in(q1, "B"),          // 2
		in(q1, "A"),          // 3: after 0
		in(q2, "X", q1, "B"), // 4: after 2
		in(q2, "X"),          // 5: after 4, so in 2's lane
		in(q2, "A"),          // 6: A at another destination
		in(q1, "", q2, ""),   // 7
	}
	if got := fmt.Sprint(orderedLanes(acc)); got != "[[0 3] [1] [2 4 5] [6] [7]]" {
		t.Fatalf("lanes %s", got)
	}
}
