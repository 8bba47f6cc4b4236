package redisstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"go.uber.org/zap"
)

// What the store learns of the Redis servers behind a client
// (docs/operating.md, "Redis restarts and persistence"): whether they
// persist writes with AOF, and which server process answers. A Redis
// without persistence loses every key and inbox event when it restarts,
// silently: the store warns when a configuration that relies on Redis
// keeping what it was told (an inbox, or `fail closed`) runs on a Redis
// without AOF, naming every such source (again when a source is added
// later, by another route's provision or a reload), and warns, and counts
// in caddy_webhook_idempotency_store_restarts_total (a series that exists
// at zero from the first provision), whenever a node's run id changes (a
// restart, or a failover to another server).
//
// Every new connection (the first at provision, and every reconnection,
// such as after a restart) asks for an inspection; a goroutine of the
// client runs it in the background, so no request waits for it.

// redisHealth is a client's view of its Redis nodes.
type redisHealth struct {
	client  redis.UniversalClient // set by start
	name    string                // the node's name when the client has one node
	timeout time.Duration
	logger  *zap.Logger

	poke   chan struct{} // buffered: asks for an inspection
	ctx    context.Context
	cancel context.CancelFunc // stops the inspections
	done   chan struct{}

	mu          sync.Mutex
	runIDs      map[string]string // by node
	noAOF       map[string]bool   // nodes seen without AOF
	needDurable map[string]bool   // sources with an inbox or `fail closed`
	warnedAOF   map[string]bool   // sources an AOF warning named
}

// newRedisHealth returns the health of a client still to be made: its
// onConnect goes into the client's options, and start starts it.
func newRedisHealth(name string, timeout time.Duration, logger *zap.Logger) *redisHealth {
	ctx, cancel := context.WithCancel(context.Background())
	return &redisHealth{
		name:        name,
		timeout:     max(timeout, time.Second),
		logger:      logger,
		poke:        make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		runIDs:      make(map[string]string),
		noAOF:       make(map[string]bool),
		needDurable: make(map[string]bool),
		warnedAOF:   make(map[string]bool),
	}
}

// start starts the inspections of client's nodes. The restarts counter
// of a client with one node exists at zero from now on, so that a rule on
// its increase sees the first restart; a Cluster's nodes get theirs when
// they are first inspected.
func (rh *redisHealth) start(client redis.UniversalClient) {
	rh.client = client
	if _, cluster := client.(*redis.ClusterClient); !cluster {
		metrics.StoreRestarts.WithLabelValues(rh.name)
	}
	go rh.run()
}

// onConnect is the client's OnConnect hook: a new connection, perhaps to a
// server that restarted, asks for an inspection.
func (rh *redisHealth) onConnect(context.Context, *redis.Conn) error {
	select {
	case rh.poke <- struct{}{}:
	default: // one is already asked for
	}
	return nil
}

func (rh *redisHealth) run() {
	defer close(rh.done)
	for {
		select {
		case <-rh.ctx.Done():
			return
		case <-rh.poke:
		}
		ctx, cancel := context.WithTimeout(rh.ctx, rh.timeout)
		rh.inspect(ctx)
		cancel()
	}
}

// close stops the inspections, the one running included.
func (rh *redisHealth) close() {
	rh.cancel()
	<-rh.done
}

// inspect reads every node's run id and persistence.
func (rh *redisHealth) inspect(ctx context.Context) {
	if cc, ok := rh.client.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			rh.inspectNode(ctx, node.Options().Addr, node)
			return nil
		})
		return
	}
	rh.inspectNode(ctx, rh.name, rh.client)
}

// inspectNode reads one node's INFO (or, where INFO is renamed away, its
// CONFIG GET appendonly) and acts on what changed.
func (rh *redisHealth) inspectNode(ctx context.Context, node string, c redis.Cmdable) {
	runID, aof, known := "", false, false
	info, err := c.Info(ctx).Result()
	if err == nil {
		fields := infoFields(info)
		rh.checkEviction(node, fields) // eviction.go
		runID = fields["run_id"]
		if v, ok := fields["aof_enabled"]; ok {
			aof, known = v == "1", true
		}
	} else if !isRedisReply(err) {
		return // not answering: the next connection asks again
	}
	if !known {
		cfg, err := c.ConfigGet(ctx, "appendonly").Result()
		if err == nil {
			if v, ok := cfg["appendonly"]; ok {
				aof, known = v == "yes", true
			}
		} else if !isRedisReply(err) {
			return
		}
	}
	restarts := metrics.StoreRestarts.WithLabelValues(node) // a new node's series starts at zero
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if prev := rh.runIDs[node]; runID != "" && prev != "" && prev != runID {
		restarts.Inc()
		rh.logger.Warn("redis node is a different server process than before (restarted, or failed over): keys and inbox events written since its last save may be lost, and deliveries recorded before may be processed again",
			zap.String("address", node), zap.String("previous_run_id", prev), zap.String("run_id", runID))
	}
	if runID != "" {
		rh.runIDs[node] = runID
	}
	if known {
		rh.noAOF[node] = !aof
	} else if _, seen := rh.noAOF[node]; !seen && runID == "" {
		rh.logger.Info("cannot read redis persistence settings (INFO and CONFIG GET unavailable): restarts and persistence go unchecked",
			zap.String("address", node))
	}
	rh.warnAOF()
}

// RequireDurable implements store.DurabilityWatcher: source relies on
// Redis keeping what it was told (an inbox, or `fail closed`), so a Redis
// without AOF is warned about.
func (s *Store) RequireDurable(source string) {
	if s.client != nil {
		s.client.health.requireDurable(source)
	}
}

// requireDurable records a source whose configuration relies on Redis
// keeping what it was told (an inbox, or `fail closed`).
func (rh *redisHealth) requireDurable(source string) {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	rh.needDurable[source] = true
	rh.warnAOF()
}

// warnAOF warns when a node has no AOF and a source that needs durability
// has not been named in such a warning yet: sources that register after
// the first inspection (later routes, a reload) get a warning of their
// own, which names every source that needs durability and the new ones.
// Once every node has AOF, the next node without it is warned about
// again. Called with rh.mu held.
func (rh *redisHealth) warnAOF() {
	var nodes []string
	for node, off := range rh.noAOF {
		if off {
			nodes = append(nodes, node)
		}
	}
	if len(nodes) == 0 {
		clear(rh.warnedAOF)
		return
	}
	var added []string
	for source := range rh.needDurable {
		if !rh.warnedAOF[source] {
			added = append(added, source)
			rh.warnedAOF[source] = true
		}
	}
	if len(added) == 0 {
		return
	}
	slices.Sort(nodes)
	slices.Sort(added)
	rh.logger.Warn("redis runs without AOF persistence (appendonly no): a restart loses the inbox's accepted events and the records of recent deliveries, which are then processed again; set appendonly yes",
		zap.String("address", nodes[0]), zap.Strings("addresses", nodes),
		zap.Strings("sources", slices.Sorted(maps.Keys(rh.needDurable))), zap.Strings("new_sources", added))
}

// isRedisReply reports whether err is an error reply of Redis (an unknown
// or forbidden command), not a failure to reach it.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// infoFields parses the `field:value` lines of an INFO reply.
func infoFields(info string) map[string]string {
	out := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}
