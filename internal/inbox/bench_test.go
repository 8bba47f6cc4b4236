package inbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// Delivery benchmarks (BENCHMARKS.md: Inbox delivery control): b.N events
// from 8 senders into an inbox (16 deliveries at once) in front of an
// application that answers 200 at once: accepted first and then drained
// (the deliveries a second from the start of the inbox to the last
// delivery), sent at a steady 200 a second to a running inbox (the lag
// from acceptance to delivery, p50 and p99), or sent as fast as they are
// accepted to a running inbox (a burst: both). On Redis each reports the
// round trips and the commands per delivery, acceptance included (INFO
// commandstats before and after; commands run by scripts are counted by
// Redis too).
//
//	go test -run '^$' -bench 'InboxDelivery|InboxLag' -benchtime 10000x ./internal/inbox
//	go test -run '^$' -bench 'InboxPartitions' -benchtime 20000x ./internal/inbox

// acceptedHeader carries an event's acceptance time to the application.
const acceptedHeader = "X-Accepted"

// lagApp is an application that answers 200 and keeps each delivery's lag.
type lagApp struct {
	*testkit.Upstream
	mu   sync.Mutex
	lags []time.Duration
	last time.Time
	n    atomic.Int64
}

func newLagApp(b *testing.B) *lagApp {
	a := &lagApp{}
	a.Upstream = testkit.NewUpstream(b, func(w http.ResponseWriter, r *http.Request, call int64) {
		at, _ := strconv.ParseInt(r.Header.Get(acceptedHeader), 10, 64)
		now := time.Now()
		a.mu.Lock()
		a.lags = append(a.lags, now.Sub(time.Unix(0, at)))
		a.last = now
		a.mu.Unlock()
		a.n.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	return a
}

// percentile of the lags, p in [0, 1].
func (a *lagApp) percentile(p float64) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := slices.Clone(a.lags)
	slices.Sort(l)
	if len(l) == 0 {
		return 0
	}
	return l[min(int(p*float64(len(l))), len(l)-1)]
}

// Ways of sending a benchmark's events.
const (
	drain = -1 * time.Nanosecond // every event accepted before the inbox starts
	flood = 0 * time.Nanosecond  // as fast as they are accepted, the inbox running
)

// burst accepts b.N events from 8 senders, the event i in group g(i) ("" for
// none), one every pace (flood: as fast as they are accepted; drain: all
// before the inbox starts), and waits until the application has received
// them all. It returns the time from the first acceptance (drain: from the
// start of the inbox) to the last delivery.
func burst(b *testing.B, ib *Inbox, app *lagApp, pace time.Duration, g func(i int) string) (took time.Duration) {
	b.Helper()
	work := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				key := "e" + strconv.Itoa(i)
				body := []byte(`{"id":"` + key + `"}`)
				hash := sha256.Sum256(body)
				headers := acceptedHeader + ": " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\r\n"
				if grp := g(i); grp != "" {
					headers += groupHeader + ": " + grp + "\r\n"
				}
				ev := event.Request{Source: ib.Source(), Key: key, StoreKey: "idem:" + ib.Source() + ":" + key,
					Method: "POST", URI: "/hook", Headers: headers, Body: body, Received: time.Now()}
				res, err := ib.Accept(context.Background(), store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, &hash, &ev)
				if err != nil || res.State != store.StateClaimed {
					b.Errorf("accepting %s: %s %v", key, res.State, err)
				}
			}
		}()
	}
	next := time.Now()
	for i := range b.N {
		if pace > 0 {
			time.Sleep(time.Until(next)) // drain and flood do not wait
			next = next.Add(pace)
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if pace == drain {
		start = time.Now()
		ib.Start()
	}
	deadline := time.Now().Add(10 * time.Minute)
	for app.n.Load() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d delivered in 10 minutes", app.n.Load(), b.N)
		}
		time.Sleep(5 * time.Millisecond)
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	return app.last.Sub(start)
}

func BenchmarkInboxDelivery(b *testing.B) {
	for _, st := range []string{"redis", "file"} {
		for _, groups := range []int{0, 1, 100, 10_000} {
			for _, rate := range []bool{false, true} {
				if rate && (st == "file" || groups != 0 && groups != 100) {
					continue
				}
				name := fmt.Sprintf("%s/groups=%d", st, groups)
				if groups == 0 {
					name = st + "/unordered"
				}
				if rate {
					name += "/rate"
				}
				b.Run(name, func(b *testing.B) { benchDelivery(b, st, groups, rate, drain) })
			}
		}
	}
}

// BenchmarkInboxLag is BenchmarkInboxDelivery at a steady 200 events a
// second, below what every case delivers but one group's.
func BenchmarkInboxLag(b *testing.B) {
	for _, st := range []string{"redis", "file"} {
		for _, groups := range []int{0, 1, 100, 10_000} {
			name := fmt.Sprintf("%s/groups=%d", st, groups)
			if groups == 0 {
				name = st + "/unordered"
			}
			b.Run(name, func(b *testing.B) { benchDelivery(b, st, groups, false, 5*time.Millisecond) })
		}
	}
}

func benchDelivery(b *testing.B, st string, groups int, rate bool, pace time.Duration) {
	var s store.Store
	var rc *redis.Client
	if st == "redis" {
		srv := testkit.StartRedis(b)
		rc = srv.Client(b)
		s = openRedisStore(b, srv.Addr())
	} else {
		fs, closeStore := openFileStore(b, filepath.Join(b.TempDir(), "store.db"))
		b.Cleanup(closeStore)
		s = fs
	}
	app := newLagApp(b)
	ib := newOrderedInbox(b, s, "bench", app.URL, func(c *Config) {
		c.Concurrency, c.Timeout, c.Retries = 16, 5*time.Second, []time.Duration{time.Second}
		if groups == 0 {
			c.GroupOf, c.OrderBy = nil, nil
		}
		if rate {
			c.Rate = Rate{N: 1_000_000, Per: time.Second} // paced, never binding
		}
	})
	if pace != drain {
		ib.Start()
	}
	var before map[string]int64
	if rc != nil {
		before = testkit.RedisCommands(b, rc)
	}
	b.ResetTimer()
	took := burst(b, ib, app, pace, func(i int) string {
		if groups == 0 {
			return ""
		}
		return "g" + strconv.Itoa(i%groups)
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "deliveries/s")
	if pace != drain {
		b.ReportMetric(float64(app.percentile(0.5).Microseconds())/1000, "p50-lag-ms")
		b.ReportMetric(float64(app.percentile(0.99).Microseconds())/1000, "p99-lag-ms")
	}
	if rc != nil {
		reportCommands(b, before, testkit.RedisCommands(b, rc))
	}
}

// roundTrips are the commands only a client sends on a delivery's path:
// scripts and stream reads (acceptance, reading, acknowledging, pacing,
// reclaiming).
var roundTrips = map[string]bool{"evalsha": true, "eval": true, "xreadgroup": true, "xautoclaim": true, "xclaim": true}

// reportCommands reports the Redis round trips and commands per delivery,
// and logs the commands by name.
func reportCommands(b *testing.B, before, after map[string]int64) {
	var total, trips int64
	var parts []string
	for name, n := range after {
		d := n - before[name]
		if d <= 0 || name == "info" {
			continue
		}
		total += d
		if roundTrips[name] {
			trips += d
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/float64(b.N)))
	}
	slices.Sort(parts)
	b.ReportMetric(float64(trips)/float64(b.N), "trips/delivery")
	b.ReportMetric(float64(total)/float64(b.N), "cmds/delivery")
	b.Logf("N=%d, commands per delivery (accept included, scripts' commands counted): %s", b.N, strings.Join(parts, ", "))
}

// BenchmarkInboxPartitions: one source on a three-master Redis Cluster
// over 1, 3 and 6 partitions, unordered, drained and flooded; with the
// share of the calls the busiest node served.
func BenchmarkInboxPartitions(b *testing.B) {
	for _, mode := range []string{"drain", "flood"} {
		for _, n := range []int{1, 3, 6} {
			b.Run(fmt.Sprintf("%s/partitions=%d", mode, n), func(b *testing.B) {
				pace := drain
				if mode == "flood" {
					pace = flood
				}
				benchPartitions(b, n, pace)
			})
		}
	}
}

func benchPartitions(b *testing.B, n int, pace time.Duration) {
	cluster := testkit.StartCluster(b)
	var nodes []*redis.Client
	for _, node := range cluster.Nodes {
		nodes = append(nodes, node.Client(b))
	}
	s := openRedisStore(b, cluster.Addrs()...)
	app := newLagApp(b)
	ib := newOrderedInbox(b, s, "hot", app.URL, func(c *Config) {
		c.Concurrency, c.Timeout, c.Retries = 32, 5*time.Second, []time.Duration{time.Second}
		c.GroupOf, c.OrderBy, c.Partitions = nil, nil, n
	})
	if pace != drain {
		ib.Start()
	}
	before := make([]map[string]int64, len(nodes))
	cpuBefore := make([]float64, len(nodes))
	for i, c := range nodes {
		before[i] = testkit.RedisCommands(b, c)
		cpuBefore[i] = testkit.RedisCPU(b, c)
	}
	b.ResetTimer()
	took := burst(b, ib, app, pace, func(int) string { return "" })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "deliveries/s")
	if pace != drain {
		b.ReportMetric(float64(app.percentile(0.5).Microseconds())/1000, "p50-lag-ms")
		b.ReportMetric(float64(app.percentile(0.99).Microseconds())/1000, "p99-lag-ms")
	}
	var shares, cpus []string
	var total, busiest int64
	var busiestCPU float64
	for i, c := range nodes {
		cpu := testkit.RedisCPU(b, c) - cpuBefore[i]
		busiestCPU = max(busiestCPU, cpu)
		cpus = append(cpus, fmt.Sprintf("%.2fs", cpu))
		after := testkit.RedisCommands(b, c)
		var d int64
		for name, v := range after {
			if name != "info" && name != "cluster|slots" && name != "cluster" {
				d += v - before[i][name]
			}
		}
		total += d
		busiest = max(busiest, d)
		shares = append(shares, strconv.FormatInt(d, 10))
	}
	b.ReportMetric(float64(busiest)/float64(total), "busiest-node-share")
	// what the busiest node could serve with a core of its own
	b.ReportMetric(float64(b.N)/busiestCPU, "busiest-node-ceiling/s")
	b.Logf("N=%d, partitions %d: calls by node %s, Redis CPU by node %s", b.N, n, strings.Join(shares, " / "), strings.Join(cpus, " / "))
}

// BenchmarkInboxAcceptReplicas is the cost of `replicas` per acceptance
// (docs/inbox.md#failover): b.N acceptances of new keys into an inbox on
// a standalone Redis with one replica (both redis-server on this host),
// with replicas 0 (the event and its key in one script) and replicas 1
// (the event and its key in flight, WAIT 1 on the same connection, then
// the key completed), one at a time (serial) and from 8 senders
// (parallel). No worker runs: acceptance alone is measured.
//
//	go test -run '^$' -bench 'InboxAcceptReplicas' -benchtime 5000x ./internal/inbox
func BenchmarkInboxAcceptReplicas(b *testing.B) {
	master := testkit.StartRedis(b)
	testkit.StartReplica(b, master)
	for _, replicas := range []int{0, 1} {
		s := openRedisStoreWith(b, &redisstore.Store{Addresses: []string{master.Addr()}, Replicas: replicas})
		ib := newOrderedInbox(b, s, "bench_replicas_"+strconv.Itoa(replicas), "http://127.0.0.1:9", func(c *Config) { c.OrderBy, c.GroupOf = nil, nil })
		var seq atomic.Int64
		accept := func(b *testing.B) {
			key := "evt_" + strconv.FormatInt(seq.Add(1), 10)
			res, err := acceptEvent(b, ib, key, "")
			if err != nil || res.State != store.StateClaimed {
				b.Errorf("accepting %s: %v %v", key, res.State, err)
			}
		}
		b.Run(fmt.Sprintf("replicas=%d/serial", replicas), func(b *testing.B) {
			for b.Loop() {
				accept(b)
			}
		})
		b.Run(fmt.Sprintf("replicas=%d/parallel", replicas), func(b *testing.B) {
			b.SetParallelism(4) // 8 senders on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					accept(b)
				}
			})
		})
	}
}
