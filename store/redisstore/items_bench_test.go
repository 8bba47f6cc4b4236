package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

// BenchmarkBatchClaim: a 100-item batch claimed in one call against one
// Claim per item, the items new or seen (storetest.BenchBatchClaim), on a
// standalone Redis and on a three-master Cluster, each started for the
// benchmark. Besides the process's CPU time it reports the store's round
// trips per op (trips/op: the pipelines it sent and waited for; a
// Cluster's pipeline goes to its masters at once, one round trip of
// latency) and the commands they carried (cmds/op: one script call per
// master for a batch), counted by a hook on the store's client.
//
//	go test -run '^$' -bench BatchClaim -benchmem ./store/redisstore
func BenchmarkBatchClaim(b *testing.B) {
	for _, topology := range []string{"standalone", "cluster"} {
		b.Run(topology, func(b *testing.B) {
			var addrs []string
			if topology == "standalone" {
				addrs = []string{testkit.StartRedis(b).Addr()}
			} else {
				addrs = testkit.StartCluster(b).Addrs()
			}
			cfg, _ := json.Marshal(addrs)
			s := provisionRedisStore(b, fmt.Sprintf(`{"addresses":%s,"timeout":"5s"}`, cfg))
			h := &countingHook{}
			s.client.client.AddHook(h)
			storetest.BenchBatchClaim(b, s, map[string]func() int64{
				"cpu-ns/op": func() int64 { return int64(testkit.CPUTime()) },
				"trips/op":  h.trips.Load,
				"cmds/op":   h.cmds.Load,
			})
		})
	}
}

// countingHook counts the round trips of a client (a command alone, or a
// pipeline) and the commands they carry.
type countingHook struct{ trips, cmds atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.trips.Add(1)
		h.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
