package redisstore

import (
	"strconv"
	"sync"

	"go.uber.org/zap"
)

// A Redis with a maxmemory and a policy that evicts (docs/stores.md,
// "Sizing"): when it is full it evicts keys, and the idempotency keys are
// keys like any other (allkeys-*) or the very keys a volatile-* policy
// chooses from, since every one of them has a TTL. An evicted key lets its
// next duplicate through to the application. The store warns about such a
// node when it inspects it (health.go), once per node and setting.

// evictionWarned holds the node, policy and maxmemory of every warning
// given, so a setting is warned about once per process.
var evictionWarned sync.Map

// checkEviction warns when the INFO fields of node show a maxmemory with a
// policy other than noeviction.
func (rh *redisHealth) checkEviction(node string, fields map[string]string) {
	policy := fields["maxmemory_policy"]
	maxMemory, _ := strconv.ParseInt(fields["maxmemory"], 10, 64)
	if maxMemory <= 0 || policy == "" || policy == "noeviction" {
		return
	}
	if _, warned := evictionWarned.LoadOrStore(node+"\x00"+policy+"\x00"+fields["maxmemory"], true); warned {
		return
	}
	rh.logger.Warn("redis can evict idempotency keys: with a maxmemory and this maxmemory-policy, a full Redis evicts keys (every idempotency key has a TTL, so volatile-* policies choose among them), and an evicted key lets its duplicate through to the application; set maxmemory-policy noeviction and size maxmemory for the keys, the inbox and the archive (the archive stops appending at 90% of maxmemory)",
		zap.String("address", node), zap.String("maxmemory_policy", policy), zap.Int64("maxmemory", maxMemory))
}
