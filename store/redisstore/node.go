package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// The nodes a client sends to (docs/stores.md, "When Redis fails"). Every
// Redis master has a breaker and a batcher of its own: a master that fails
// or hangs fails only the calls of the keys it serves, at once once its
// breaker is open, and its calls never wait in the queue or the pipeline
// of the others. A standalone server, or Sentinel's master, is one node.
//
// On a Redis Cluster a key's node is its slot's master in go-redis's copy
// of the slot map. While a node's breaker is open its probe pings the
// node and, when it does not answer, reads the slot map again: once a
// replica has taken the node's slots over (a failover), the map sends
// their keys to the replica, a node of its own with a closed breaker, and
// the old node, which serves no slot any more, is done with. go-redis
// itself reads the map again only on a MOVED reply or once a minute, which
// a dead master never sends.

// redisNode is one Redis master as the store sees it.
type redisNode struct {
	addr    string                       // host:port, or the Sentinel master's name
	client  atomic.Pointer[redis.Client] // the node's own client (the probe, replica waits)
	breaker *breaker
	batch   *redisBatcher // the node's calls; on Cluster, sent through the cluster client
}

// redisNodes are a client's nodes: one, or a Cluster's masters as they are
// met.
type redisNodes struct {
	cluster *redis.ClusterClient // nil for one node
	one     *redisNode           // standalone or Sentinel
	// slotMap guards reading a Cluster's slot map when go-redis has none
	// (no node answered yet): its probe reads the map.
	slotMap *breaker
	timeout time.Duration
	logger  *zap.Logger

	mu     sync.RWMutex
	byAddr map[string]*redisNode
	closed bool
}

func newRedisNodes(client redis.UniversalClient, name string, timeout time.Duration, logger *zap.Logger) *redisNodes {
	ns := &redisNodes{timeout: timeout, logger: logger}
	if cc, ok := client.(*redis.ClusterClient); ok {
		ns.cluster = cc
		ns.byAddr = make(map[string]*redisNode)
		ns.slotMap = newBreaker("cluster slot map", func(ctx context.Context) error {
			_, err := ns.masters(ctx)
			return err
		}, timeout, logger)
		return ns
	}
	n := &redisNode{addr: name, batch: newRedisBatcher(client, timeout)}
	c, _ := client.(*redis.Client) // NewUniversalClient's, for one address or Sentinel
	n.client.Store(c)
	n.breaker = newBreaker(name, func(ctx context.Context) error {
		return client.Ping(ctx).Err()
	}, timeout, logger)
	ns.one = n
	return ns
}

// forKey returns the node that serves key: the one node, or on a Cluster
// its slot's master.
func (ns *redisNodes) forKey(ctx context.Context, key string) (*redisNode, error) {
	if ns.cluster == nil {
		return ns.one, nil
	}
	if !ns.slotMap.allow() {
		return nil, errRedisBreakerOpen
	}
	// go-redis reads the slot map here only when it has none
	mc, err := ns.cluster.MasterForKey(ctx, key)
	if err != nil {
		if ctx.Err() == nil {
			ns.slotMap.failure()
		}
		return nil, err
	}
	ns.slotMap.success()
	addr := mc.Options().Addr
	ns.mu.RLock()
	n := ns.byAddr[addr]
	ns.mu.RUnlock()
	if n == nil {
		return ns.add(addr, mc), nil
	}
	if n.client.Load() != mc {
		// go-redis closed the node's client once it left the slot map,
		// and made another when it came back
		n.client.Store(mc)
	}
	return n, nil
}

// add returns the node of addr, made if new.
func (ns *redisNodes) add(addr string, client *redis.Client) *redisNode {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if n := ns.byAddr[addr]; n != nil {
		return n
	}
	n := &redisNode{addr: addr, batch: newRedisBatcher(ns.cluster, ns.timeout)}
	n.client.Store(client)
	n.breaker = newBreaker(addr, func(ctx context.Context) error { return ns.probe(ctx, n) }, ns.timeout, ns.logger)
	if ns.closed {
		n.breaker.close() // never opens
	}
	ns.byAddr[addr] = n
	return n
}

// errStillServing is a probe's answer for a node that neither answers nor
// has handed its slots over.
var errStillServing = errors.New("node does not answer and still serves its slots")

// probe is a Cluster node's breaker probe: the node answers again, or it
// serves no slot any more (its replica took over), which closes its
// breaker: no call goes to it.
func (ns *redisNodes) probe(ctx context.Context, n *redisNode) error {
	if err := n.client.Load().Ping(ctx).Err(); err == nil {
		return nil
	}
	masters, err := ns.masters(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(masters, n.addr) {
		ns.logger.Info("redis cluster node no longer serves any slot: its keys go to the node that took them over",
			zap.String("address", n.addr), zap.Strings("masters", masters))
		return nil
	}
	return errStillServing
}

// masters reads the Cluster's slot map again and returns its masters.
func (ns *redisNodes) masters(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var addrs []string
	// ForEachMaster reads the slot map before it calls its function
	err := ns.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		addrs = append(addrs, m.Options().Addr)
		mu.Unlock()
		return nil
	})
	return addrs, err
}

// all returns every node met so far.
func (ns *redisNodes) all() []*redisNode {
	if ns.cluster == nil {
		return []*redisNode{ns.one}
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	out := make([]*redisNode, 0, len(ns.byAddr))
	for _, n := range ns.byAddr {
		out = append(out, n)
	}
	return out
}

// unreachable opens every breaker: the store did not answer at
// provision time.
func (ns *redisNodes) unreachable() {
	if ns.cluster == nil {
		ns.one.breaker.open()
		return
	}
	ns.slotMap.open()
}

// stopProbes stops every breaker's probe; breakers open no more.
func (ns *redisNodes) stopProbes() {
	ns.mu.Lock()
	ns.closed = true
	ns.mu.Unlock()
	if ns.slotMap != nil {
		ns.slotMap.close()
	}
	for _, n := range ns.all() {
		n.breaker.close()
	}
}

// close stops every node's batcher.
func (ns *redisNodes) close() {
	for _, n := range ns.all() {
		n.batch.close()
	}
}
