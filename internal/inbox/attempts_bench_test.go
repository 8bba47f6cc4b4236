package inbox

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// BenchmarkRedisAttemptRecord is what recording an inbox attempt costs
// Redis (docs/scale.md, docs/inbox.md#attempts): b.N events' first
// attempts, one call at a time as a worker sends them, each answered 200
// with a small JSON answer (Content-Type, Date, Content-Length and
// {"ok":true}), into a history of its own; without a bound on the source's
// histories (no archive) and with one (an archive: the sorted set of the
// histories by their last attempt, of at most max_events). Reports Redis's
// CPU per attempt (INFO cpu), its commands, and used_memory's growth per
// history.
//
//	go test -run '^$' -bench 'RedisAttemptRecord' -benchtime 20000x ./internal/inbox
func BenchmarkRedisAttemptRecord(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	for _, bound := range []int{0, 1_000_000} {
		name := "unbounded"
		if bound > 0 {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			ib := newOrderedInbox(b, openRedisStore(b, srv.Addr()), "attempts-"+name, "http://127.0.0.1:1/webhook", func(c *Config) {
				c.GroupOf, c.OrderBy = nil, nil
			})
			log := ib.src.q.(*redisQueue).histories()
			ctx := context.Background()
			lg := &logged{
				attempt: event.Attempt{
					At: time.Now(), Destination: "http://127.0.0.1:9000/webhooks/stripe", Number: 1, Status: 200, Latency: 3 * time.Millisecond,
					Headers: "Content-Length: 12\r\nContent-Type: application/json\r\nDate: Mon, 07 Dec 2026 10:00:00 GMT\r\n",
					Body:    []byte(`{"ok":true}` + "\n"),
				},
				life: 24 * time.Hour, max: bound,
			}
			lg.key = "warm"
			if err := log.add(ctx, lg); err != nil { // loads the script
				b.Fatal(err)
			}
			cmd0, cpu0, mem0 := testkit.RedisCommands(b, rc), testkit.RedisCPU(b, rc), testkit.RedisUsedMemory(b, rc)
			b.ResetTimer()
			for i := range b.N {
				lg.key = "evt_" + strconv.Itoa(i)
				if err := log.add(ctx, lg); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cmd1, cpu1, mem1 := testkit.RedisCommands(b, rc), testkit.RedisCPU(b, rc), testkit.RedisUsedMemory(b, rc)
			var cmds int64
			for name, c := range cmd1 {
				if name != "info" {
					cmds += c - cmd0[name]
				}
			}
			n := float64(b.N)
			b.ReportMetric((cpu1-cpu0)*1e6/n, "redis-µs/attempt")
			b.ReportMetric(float64(cmds)/n, "commands/attempt")
			b.ReportMetric((mem1-mem0)/n, "B/history")
		})
	}
}
