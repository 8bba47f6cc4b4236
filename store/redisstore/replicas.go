package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Writes that wait for replicas (docs/stores.md, "Failover"). Redis
// replicates asynchronously: a write its master answered, then lost in a
// failover before a replica had it, is gone. With `replicas <n>` an inbox
// acceptance (and with `completions` every completion) is followed, on the
// same connection, by `WAIT <n> <timeout>`, which answers once n replicas
// have every write the connection made, or at the timeout with how many
// had. The write and the WAIT are two round trips on one connection of
// the key's master (a pipeline's reply is bounded by the store's
// `timeout`, and a WAIT may take longer).

// ErrNotReplicated is the error of a write that fewer replicas than
// `replicas` acknowledged within `replicas_timeout`: it is on the master
// only, and a failover now would lose it.
var ErrNotReplicated = errors.New("fewer replicas than `replicas` acknowledged the write in time")

// setReplicas applies `replicas <n> [<timeout>] [completions]`.
func (s *Store) setReplicas(args []string) error {
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("invalid replicas '%s': want a positive integer", args[0])
	}
	s.Replicas = n
	rest := args[1:]
	if len(rest) > 0 && rest[len(rest)-1] == "completions" {
		s.ReplicasCompletions = true
		rest = rest[:len(rest)-1]
	}
	switch len(rest) {
	case 0:
	case 1:
		if s.ReplicasTimeout, err = cfparse.PositiveDuration("replicas timeout", rest[0]); err != nil {
			return err
		}
	default:
		return fmt.Errorf("replicas takes <n> [<timeout>] [completions], got %d values", len(args))
	}
	return nil
}

// runReplicated runs script on keys[0]'s master and waits for the
// store's replicas to acknowledge it; op names it in errors, logs and
// metrics. When too few did, it returns the script's reply with an error
// that wraps ErrNotReplicated, and counts and logs the shortfall.
func (s *Store) runReplicated(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) (any, error) {
	n, err := s.callable(ctx, op, keys[0], nil)
	if err != nil {
		return nil, err
	}
	wait := time.Duration(s.ReplicasTimeout)
	ctx, cancel := context.WithTimeout(ctx, s.timeout+wait)
	defer cancel()
	conn := n.client.Load().Conn() // the WAIT counts the writes of its own connection
	defer conn.Close()
	v, err := script.Run(ctx, conn, keys, args...).Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err == nil {
		var acked int64
		acked, err = conn.Wait(ctx, s.Replicas, wait).Result()
		if err == nil && acked < int64(s.Replicas) {
			s.notReplicated(n, op, keys[0], acked)
			return v, fmt.Errorf("redis store: %s: %w (%d of %d within %v)", op, ErrNotReplicated, acked, s.Replicas, wait)
		}
	}
	if redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
		// the key moved (a failover, a resharding): the next call asks
		// the new master
		if cc := s.client.nodes.cluster; cc != nil {
			cc.ReloadState(ctx)
		}
	}
	if err = s.settle(ctx, n, op, err); err != nil {
		return v, err
	}
	return v, nil
}

// notReplicated counts and logs a write on n that acked replicas
// acknowledged in time, fewer than the store's replicas.
func (s *Store) notReplicated(n *redisNode, op, key string, acked int64) {
	metrics.StoreReplicasShort.WithLabelValues(n.addr, op).Inc()
	s.logger.Warn("fewer redis replicas than `replicas` acknowledged a write in time: it is on the master only, and a failover now would lose it",
		zap.String("op", op), zap.String("key", key), zap.String("address", n.addr),
		zap.Int64("acknowledged", acked), zap.Int("replicas", s.Replicas),
		zap.Duration("replicas_timeout", time.Duration(s.ReplicasTimeout)))
}

// completeReplicated is a completion that waits for the store's replicas
// (`replicas … completions`). The key (with its guard, on one node) is
// completed and waited for; on Redis Cluster a guard is completed first,
// without waiting, and the commands of then are sent after the completion.
// A completion too few replicas acknowledged is recorded on the master:
// the shortfall is counted and logged, and the completion succeeds.
func (s *Store) completeReplicated(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, then *redisThen) error {
	keys := []string{key}
	if guard != "" {
		if s.client.cluster() {
			_ = s.ownerOp(ctx, "complete", redisCompleteScript, nil, []string{guard}, owner, record, redisMillis(ttl))
		} else {
			keys = append(keys, guard)
		}
	}
	if then != nil {
		then.err = errRedisNotSent
	}
	v, err := s.runReplicated(ctx, "complete", redisCompleteScript, keys, owner, record, redisMillis(ttl))
	if errors.Is(err, ErrNotReplicated) {
		err = nil
	}
	if err != nil {
		return err
	}
	if then != nil {
		s.sendThen(ctx, then)
	}
	if v != int64(1) {
		return store.ErrNotOwner
	}
	return nil
}

// sendThen sends the commands of then in one pipeline, each to its node.
func (s *Store) sendThen(ctx context.Context, then *redisThen) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := s.client.client.Pipeline()
	cmds := make([]*redis.Cmd, len(then.cmds))
	for i, args := range then.cmds {
		cmds[i] = pipe.Do(ctx, args...)
	}
	_, _ = pipe.Exec(ctx)
	then.val, then.err = cmds[0].Result()
	for _, cmd := range cmds[1:] {
		if err := cmd.Err(); err != nil && then.err == nil {
			then.err = err
		}
	}
}

// Replicas returns the number of replicas an acceptance waits for, 0 for
// none.
func (st Streams) Replicas() int { return st.s.Replicas }

// RunReplicated runs script on keys (one node's: keys[0]'s master) and
// waits for the store's replicas, as an acceptance does; when too few
// acknowledged it in time, the error wraps ErrNotReplicated and the reply
// is returned with it.
func (st Streams) RunReplicated(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return st.s.runReplicated(ctx, "accept", script, keys, args...)
}
