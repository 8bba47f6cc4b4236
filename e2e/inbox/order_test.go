package inboxe2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Delivery control end to end (docs/inbox.md#delivery-control): order_by
// on a standalone Redis, a Redis Cluster and the file store, across a
// SIGKILL; a rate shared by two Caddy instances; a hot source spread over
// the nodes of a Cluster; the admin API and the lag metric.

// orderedEvent is the body of an event of group, as a provider sends it:
// the group is the object the event is about.
func orderedEvent(key, group string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"data":{"object":{"id":%q}}}`, key, group))
}

// appLog is an application that answers by a rule and keeps what it
// received, in order.
type appLog struct {
	*testkit.Upstream
	mu   sync.Mutex
	seen []seenAttempt
}

type seenAttempt struct {
	key, broken, attempt string
	status               int
	at                   time.Time
}

// newAppLog starts an application; answer gets the event's key and how
// many times it came (1 first), and may hold the request; a status of 0
// sends no answer.
func newAppLog(t *testing.T, answer func(r *http.Request, key string, n int) int) *appLog {
	a := &appLog{}
	a.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		key := r.Header.Get("Idempotency-Key")
		a.mu.Lock()
		n := 1
		for _, s := range a.seen {
			if s.key == key {
				n++
			}
		}
		a.mu.Unlock()
		status := answer(r, key, n)
		a.mu.Lock()
		a.seen = append(a.seen, seenAttempt{key: key, broken: r.Header.Get("Webhook-Order-Broken"),
			attempt: r.Header.Get("Webhook-Attempt"), status: status, at: time.Now()})
		a.mu.Unlock()
		if status > 0 { // 0: no answer, the connection dropped
			w.WriteHeader(status)
		}
	})
	return a
}

func (a *appLog) attempts() []seenAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// delivered lists the keys answered 2xx, in the order they were answered.
func (a *appLog) delivered(prefix string) []string {
	var out []string
	for _, s := range a.attempts() {
		if s.status >= 200 && s.status < 300 && strings.HasPrefix(s.key, prefix) {
			out = append(out, s.key)
		}
	}
	return out
}

// wantOrdered fails unless the group of prefix was delivered as want, and
// no event of it was attempted before the one ahead of it was delivered.
func (a *appLog) wantOrdered(t *testing.T, prefix string, want ...string) {
	t.Helper()
	if got := a.delivered(prefix); !slices.Equal(got, want) {
		t.Fatalf("group %s delivered as %v, want %v; attempts: %v", prefix, got, want, a.attempts())
	}
	done := map[string]bool{}
	for _, s := range a.attempts() {
		if !strings.HasPrefix(s.key, prefix) {
			continue
		}
		if i := slices.Index(want, s.key); i > 0 && !done[want[i-1]] {
			t.Fatalf("%s was attempted before %s was delivered: %v", s.key, want[i-1], a.attempts())
		}
		if s.status >= 200 && s.status < 300 {
			done[s.key] = true
		}
	}
}

// orderedInbox is an inbox block ordered by the object the event is about.
func orderedInbox(upURL string, extra ...string) string {
	lines := append([]string{
		"deliver_to " + upURL + "/hook",
		"retries 300ms 300ms 300ms 300ms",
		"jitter 0%",
		"timeout 2s",
		"order_by json:data.object.id",
	}, extra...)
	return strings.Join(lines, "\n\t\t\t")
}

// A group whose first event fails twice is delivered 1, 2, 3, in order,
// while another group is delivered meanwhile: on a standalone Redis, on a
// three-master Cluster with the source over three partitions, and on the
// file store.
func TestInboxOrderByDeliversEachGroupInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return "store redis redis://" + testkit.StartRedis(t).Addr() }},
		{"cluster", func(t *testing.T) string { return testkit.StartCluster(t).StoreBlock("timeout 5s") }},
		{"file", func(t *testing.T) string { return "store file " + filepath.Join(t.TempDir(), "store.db") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newAppLog(t, func(r *http.Request, key string, n int) int {
				if key == "a1" && n <= 2 {
					return http.StatusInternalServerError
				}
				return http.StatusOK
			})
			extra := []string{}
			if tc.name == "cluster" {
				extra = append(extra, "partitions 3")
			}
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", inboxSite(port, "ordered", tc.store(t), orderedInbox(app.URL, extra...)))
			url := testkit.SiteURL(port) + "/hook"
			for _, e := range [][2]string{{"a1", "sub_A"}, {"a2", "sub_A"}, {"b1", "sub_B"}, {"a3", "sub_A"}, {"b2", "sub_B"}, {"n1", ""}} {
				body := orderedEvent(e[0], e[1])
				if e[1] == "" {
					body = []byte(`{"id":"n1","data":{}}`)
				}
				resp, b := testkit.Post(t, url, body, "Idempotency-Key", e[0])
				wantAccepted(t, resp, b)
			}
			testkit.WaitFor(t, 20*time.Second, "every event delivered", func() (bool, string) {
				return len(app.delivered("")) == 6, fmt.Sprint(app.attempts())
			})
			app.wantOrdered(t, "a", "a1", "a2", "a3")
			app.wantOrdered(t, "b", "b1", "b2")
			var a1Done, b2Done time.Time
			for _, s := range app.attempts() {
				switch {
				case s.key == "a1" && s.status == http.StatusOK:
					a1Done = s.at
				case s.key == "b2" && s.status == http.StatusOK:
					b2Done = s.at
				}
			}
			if !b2Done.Before(a1Done) {
				t.Fatalf("group B was done at %s, after a1 (%s): it waited for group A's retries", b2Done.Format(time.StampMilli), a1Done.Format(time.StampMilli))
			}
			for _, s := range app.attempts() {
				if s.key == "a1" && s.status == http.StatusOK && s.attempt != "3" {
					t.Fatalf("a1 delivered on attempt %s, want 3", s.attempt)
				}
			}
		})
	}
}

// A Caddy killed with SIGKILL while a group's head is in delivery keeps the
// group's order: the next process takes the head over, delivers it, and
// only then the events behind it; on Redis and on the file store.
func TestInboxOrderByKeepsOrderAcrossKill(t *testing.T) {
	for _, name := range []string{"redis", "file"} {
		t.Run(name, func(t *testing.T) {
			var st string
			if name == "redis" {
				st = "store redis redis://" + testkit.StartRedis(t).Addr()
			} else {
				st = "store file " + filepath.Join(t.TempDir(), "store.db")
			}
			firstArrived := make(chan struct{})
			var once sync.Once
			app := newAppLog(t, func(r *http.Request, key string, n int) int {
				if key == "a1" && n == 1 {
					once.Do(func() { close(firstArrived) })
					<-r.Context().Done() // hangs until its process dies
					return 0
				}
				return http.StatusOK
			})
			port := testkit.FreePort(t)
			// a1's attempt must outlast the steps up to the kill on a
			// loaded machine (its timeout would end it, and a retry
			// deliver it, before); on Redis the next process takes it
			// over after three timeouts
			sites := inboxSite(port, "killed", st, strings.Replace(orderedInbox(app.URL), "timeout 2s", "timeout 5s", 1))
			ready := testkit.SiteURL(port) + "/ready"
			first := testkit.StartProcess(t, "", sites, ready)
			url := testkit.SiteURL(port) + "/hook"
			for _, e := range [][2]string{{"a1", "A"}, {"a2", "A"}, {"a3", "A"}, {"b1", "B"}} {
				resp, b := testkit.Post(t, url, orderedEvent(e[0], e[1]), "Idempotency-Key", e[0])
				wantAccepted(t, resp, b)
			}
			select {
			case <-firstArrived:
			case <-time.After(30 * time.Second):
				t.Fatalf("a1 was not delivered within 30s\n%s", first.Log())
			}
			testkit.WaitFor(t, 10*time.Second, "b1 delivered while a1 hangs", func() (bool, string) {
				return len(app.delivered("b")) == 1, fmt.Sprint(app.attempts())
			})
			first.Kill()
			if got := app.delivered("a"); len(got) != 0 {
				t.Fatalf("delivered %v while a1 was in delivery", got)
			}
			second := testkit.StartProcess(t, "", sites, ready)
			testkit.WaitFor(t, 90*time.Second, "group A delivered by the next process", func() (bool, string) {
				return len(app.delivered("a")) == 3, fmt.Sprint(app.attempts(), "\n", second.Log())
			})
			app.wantOrdered(t, "a", "a1", "a2", "a3")
			for _, s := range app.attempts() {
				if s.key == "a1" && s.status == http.StatusOK && s.attempt != "2" {
					t.Fatalf("a1 after the kill came as attempt %s, want 2: the interrupted one counts", s.attempt)
				}
			}
		})
	}
}

// Two Caddy instances sharing a Redis, each with `rate 10/s`, deliver 40
// events at 10 a second in total: about 4s, not the 2s two separate
// limits would allow; both instances deliver, and every event arrives
// once.
func TestInboxRateSharedByTwoInstances(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := newAppLog(t, func(r *http.Request, key string, n int) int {
		time.Sleep(30 * time.Millisecond)
		return http.StatusOK
	})
	inbox := fmt.Sprintf("deliver_to %s/hook\n\t\t\trate 10/s\n\t\t\tconcurrency 4", app.URL)
	st := "store redis redis://" + srv.Addr()
	portA, portB := testkit.FreePort(t), testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", inboxSite(portA, "paced", st, inbox))
	testkit.StartProcess(t, "", inboxSite(portB, "paced", st, inbox), testkit.SiteURL(portB)+"/ready")

	const n = 40
	start := time.Now()
	for i := range n {
		port := []int{portA, portB}[i%2]
		key := fmt.Sprint("evt_", i)
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(key), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() (bool, string) {
		return len(app.delivered("")) == n, fmt.Sprint(len(app.delivered("")), " delivered")
	})
	seen := app.attempts()
	last := seen[len(seen)-1].at
	took := last.Sub(start)
	t.Logf("40 events at 10/s over two instances: the last delivered %s after the first was sent", took)
	// 40 evenly spaced at 100ms: the last starts 3.9s after the first
	if took < 3*time.Second {
		t.Fatalf("40 deliveries at a shared 10/s took %s, want about 4s (at least 3s)", took)
	}
	got := deliveriesByKey(app.Upstream)
	for i := range n {
		if k := fmt.Sprint("evt_", i); got[k] != 1 {
			t.Errorf("%s delivered %d times, want once", k, got[k])
		}
	}
	// the instance in this process delivered some, the other the rest
	mine, _ := c.Metrics(t).Value("caddy_webhook_idempotency_inbox_deliveries_total", "source", "paced", "outcome", "delivered")
	if mine < 1 || mine > n-1 {
		t.Fatalf("this instance delivered %v of %d: want both instances delivering", mine, n)
	}
	t.Logf("this instance delivered %v, the other %v", mine, n-mine)
}

// One busy source over six partitions on a three-master Cluster: its
// streams live on several nodes, and every event is delivered once.
func TestInboxPartitionsSpreadHotSourceOverCluster(t *testing.T) {
	cluster := testkit.StartCluster(t)
	cc := cluster.Client(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	app := newAppLog(t, func(r *http.Request, key string, n int) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", inboxSite(port, "hot", cluster.StoreBlock("timeout 5s"),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\ttimeout 10s\n\t\t\tpartitions 6\n\t\t\tconcurrency 8", app.URL)))
	url := testkit.SiteURL(port) + "/hook"
	const n = 120
	for i := range n {
		key := fmt.Sprint("evt_hot_", i)
		resp, b := testkit.Post(t, url, []byte(key), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	// while the application holds its deliveries, the events sit in the
	// six streams: count them by node
	ctx := context.Background()
	byNode := map[string]int64{}
	var total int64
	for i := range 6 {
		stream := fmt.Sprintf("{idem:hot:%d}:inbox", i)
		nlen, err := cc.XLen(ctx, stream).Result()
		if err != nil {
			t.Fatalf("XLEN %s: %v", stream, err)
		}
		slot, err := cc.ClusterKeySlot(ctx, stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		node := nodeOfSlot(t, cluster, slot)
		byNode[node] += nlen
		total += nlen
		if nlen == 0 {
			t.Errorf("partition %d holds no event of 120", i)
		}
	}
	if total != n {
		t.Fatalf("the partitions hold %d events, want %d", total, n)
	}
	if len(byNode) < 2 {
		t.Fatalf("the source's partitions are on %d node(s): %v", len(byNode), byNode)
	}
	t.Logf("events by node: %v", byNode)
	releaseOnce.Do(func() { close(release) })
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() (bool, string) {
		return len(app.delivered("")) == n, fmt.Sprint(len(app.delivered("")))
	})
	got := deliveriesByKey(app.Upstream)
	for i := range n {
		if k := fmt.Sprint("evt_hot_", i); got[k] != 1 {
			t.Errorf("%s delivered %d times, want once", k, got[k])
		}
	}
}

// nodeOfSlot returns the address of the node serving slot.
func nodeOfSlot(t *testing.T, c *testkit.Cluster, slot int64) string {
	t.Helper()
	for _, node := range c.Nodes {
		shards, err := node.Client(t).ClusterShards(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range shards {
			for _, r := range s.Slots {
				if r.Start <= slot && slot <= r.End {
					for _, n := range s.Nodes {
						if n.Role == "master" {
							return fmt.Sprintf("%s:%d", n.IP, n.Port)
						}
					}
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
}

// A reload from one partition to four, while a group waits for its head's
// retries in the old stream, loses and reorders nothing.
func TestInboxPartitionsChangeOnReload(t *testing.T) {
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	healthy := make(chan struct{})
	app := newAppLog(t, func(r *http.Request, key string, n int) int {
		select {
		case <-healthy:
			return http.StatusOK
		default:
			return http.StatusServiceUnavailable
		}
	})
	port := testkit.FreePort(t)
	st := "store redis redis://" + srv.Addr()
	c := testkit.StartCaddy(t, "", inboxSite(port, "reparted", st, orderedInbox(app.URL)))
	url := testkit.SiteURL(port) + "/hook"
	post := func(key, group string) {
		resp, b := testkit.PostAfterReload(t, url, orderedEvent(key, group), "Idempotency-Key", key)
		wantAccepted(t, resp, b)
	}
	for i := range 3 {
		post(fmt.Sprint("a", i), "A")
		post(fmt.Sprint("b", i), "B"+strconv.Itoa(i))
	}
	testkit.WaitFor(t, 10*time.Second, "the heads attempted", func() (bool, string) {
		return len(app.attempts()) >= 4, fmt.Sprint(app.attempts())
	})
	if err := c.Reload(inboxSite(port, "reparted", st, orderedInbox(app.URL, "partitions 4"))); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		post(fmt.Sprint("a", i), "A")
		post(fmt.Sprint("b", i), "B"+strconv.Itoa(i))
	}
	close(healthy)
	testkit.WaitFor(t, 30*time.Second, "every event delivered", func() (bool, string) {
		return len(app.delivered("")) == 12, fmt.Sprint(app.delivered(""))
	})
	app.wantOrdered(t, "a", "a0", "a1", "a2", "a3", "a4", "a5")
	got := deliveriesByKey(app.Upstream)
	for _, k := range app.delivered("") {
		if got[k] < 1 {
			t.Errorf("%s not delivered", k)
		}
	}
	// the old stream drains and leaves the registry; the new ones exist
	testkit.WaitFor(t, 20*time.Second, "the old layout leaves the registry", func() (bool, string) {
		m, err := rc.SMembers(context.Background(), "{idem:reparted}:partitions").Result()
		return err == nil && slices.Equal(m, []string{"4"}), fmt.Sprint(m, err)
	})
}

// The admin API shows the groups that have waited longest and what holds
// them, and the rate; the metrics have the delivery lag per source.
func TestInboxAdminShowsGroupsAndRate(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := newAppLog(t, func(r *http.Request, key string, n int) int {
		if key == "a1" {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	port := testkit.FreePort(t)
	// a source of the run's own: its metrics are the process's, and a run
	// under -count would find the last one's
	source := fmt.Sprintf("watched_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", inboxSite(port, source, "store redis redis://"+srv.Addr(),
		fmt.Sprintf("deliver_to %s/hook\n\t\t\tretries 1h\n\t\t\torder_by json:data.object.id\n\t\t\trate 50/s", app.URL)))
	url := testkit.SiteURL(port) + "/hook"
	for _, e := range [][2]string{{"a1", "sub_A"}, {"a2", "sub_A"}, {"b1", "sub_B"}, {"c1", "sub_C"}} {
		resp, b := testkit.Post(t, url, orderedEvent(e[0], e[1]), "Idempotency-Key", e[0])
		wantAccepted(t, resp, b)
	}
	type delivery struct {
		Pending   int64    `json:"pending"`
		Scheduled int64    `json:"scheduled"`
		OrderBy   []string `json:"order_by"`
		Groups    struct {
			Pending int64 `json:"pending"`
			Held    int64 `json:"held"`
			Longest []struct {
				Group   string `json:"group"`
				Pending int64  `json:"pending"`
				Since   string `json:"since"`
				Head    struct {
					State      string `json:"state"`
					Attempts   int    `json:"attempts"`
					LastStatus int    `json:"last_status"`
					Due        string `json:"due"`
				} `json:"head"`
			} `json:"longest_waiting"`
		} `json:"groups"`
		Partitions int `json:"partitions"`
		Rate       struct {
			Limit     string  `json:"limit"`
			PerSecond float64 `json:"per_second"`
			Current   float64 `json:"current_per_second"`
			Throttled bool    `json:"throttled"`
		} `json:"rate"`
	}
	var d delivery
	testkit.WaitFor(t, 10*time.Second, "group A held by its scheduled head, B and C delivered", func() (bool, string) {
		d = delivery{}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/inbox", &d)
		return d.Scheduled == 1 && d.Groups.Pending == 1 && len(app.delivered("")) == 2, fmt.Sprintf("%+v", d)
	})
	g := d.Groups.Longest
	if len(g) != 1 || g[0].Group != "sub_A" || g[0].Pending != 2 || g[0].Head.State != "scheduled" || g[0].Head.LastStatus != 503 || g[0].Head.Due == "" || d.Groups.Held != 1 {
		t.Fatalf("groups %+v: want sub_A, 2 pending, held by its head scheduled after a 503", d.Groups)
	}
	if d.Rate.Limit != "50/s" || d.Rate.PerSecond != 50 || d.Rate.Current != 50 || d.Partitions != 1 || !slices.Equal(d.OrderBy, []string{"json:data.object.id"}) {
		t.Fatalf("delivery %+v: want rate 50/s in force, one partition, the order_by source", d)
	}
	resp, body := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"+source+"/inbox?groups=0"), nil)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("groups=0: %d %s, want 400", resp.StatusCode, body)
	}
	m := c.Metrics(t)
	if n, ok := m.Value("caddy_webhook_idempotency_inbox_delivery_lag_seconds_count", "source", source); !ok || n != 2 {
		t.Fatalf("lag histogram count %v (%t), want the 2 delivered events", n, ok)
	}
	if v, ok := m.Value("caddy_webhook_idempotency_inbox_rate_limit", "source", source); !ok || v != 50 {
		testkit.WaitFor(t, 30*time.Second, "the rate gauge", func() (bool, string) {
			v, ok = c.Metrics(t).Value("caddy_webhook_idempotency_inbox_rate_limit", "source", source)
			return ok && v == 50, fmt.Sprint(v, ok)
		})
	}
}
