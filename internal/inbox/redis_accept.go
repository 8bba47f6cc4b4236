package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// A Redis queue's acceptance: an event stored with its key, for each of
// its destinations, in one script on one node (a standalone Redis or
// Sentinel), a request's items in one script, or on Redis Cluster the
// claim, each destination's append and the completion one after the
// other; with `replicas`, an acceptance too few replicas acknowledged
// withdrawn.

// placed is where an admission goes: the partition of its destination's
// queue for its group, and the partitions of other layouts that may hold
// its group's pending events.
type placed struct {
	q      *redisQueue
	target *partition
	follow []*partition
	group  string
	answer string // admission.answer in ms, "" for none
}

func (q *redisQueue) place(to []admission) []placed {
	out := make([]placed, len(to))
	for i, a := range to {
		rq := a.q.(*redisQueue)
		target, follow := rq.route(a.group)
		out[i] = placed{q: rq, target: target, follow: follow, group: a.group}
		if !a.answer.IsZero() {
			out[i].answer = strconv.FormatInt(a.answer.UnixMilli(), 10)
		}
	}
	return out
}

func (q *redisQueue) accept(ctx context.Context, c store.Claim, record []byte, ev *event.Request, extra []any, to []admission) (store.ClaimResult, []admitted, error) {
	entry := append(fields(ev, "0", "0", ""), extra...)
	places := q.place(to)
	if q.cluster {
		return q.acceptCluster(ctx, c, record, entry, places)
	}
	key, guard, noted, owner := c.Key, c.Guard, c.Noted, c.Owner
	keys, args := appendArgs(places)
	if q.streams.Replicas() == 0 {
		res, a, err := q.streams.ClaimAndAppend(ctx, key, guard, noted, acceptScript, keys, args, record, q.acceptTTL, q.noteTTL, entry)
		if err != nil || res.State != store.StateClaimed {
			return res, nil, err
		}
		ids, err := parseAdmitted(a, places, key)
		return res, ids, err
	}
	// the key stays in flight until the replicas have the event
	res, a, err := q.streams.ClaimAndAppendReplicated(ctx, key, guard, noted, owner, q.accepting, acceptScript, keys, args, q.noteTTL, entry)
	if res.State != store.StateClaimed {
		return res, nil, err
	}
	completeGuard := c.CompletionGuard()
	ids, perr := parseAdmitted(a, places, key)
	if err != nil || perr != nil {
		q.refuse(key, completeGuard, owner, ids, places)
		return store.ClaimResult{}, nil, cmp.Or(err, perr)
	}
	q.completeAccepted(key, completeGuard, owner, record)
	return res, ids, nil
}

func (q *redisQueue) acceptBatch(ctx context.Context, items []acceptance) ([]store.ClaimResult, [][]admitted, bool, error) {
	if q.cluster || q.streams.Replicas() > 0 {
		return nil, nil, false, nil
	}
	batch := make([]redisstore.AppendItem, len(items))
	places := make([][]placed, len(items))
	for i, it := range items {
		if it.c.Guard != "" {
			return nil, nil, false, nil
		}
		places[i] = q.place(it.to)
		keys, args := appendArgs(places[i])
		batch[i] = redisstore.AppendItem{Key: it.c.Key, Record: it.record, Keys: keys, Args: args, Event: append(fields(it.ev, "0", "0", ""), it.extra...)}
	}
	res, replies, err := q.streams.ClaimAndAppendBatch(ctx, acceptBatchScript, batch, q.acceptTTL)
	if err != nil {
		return nil, nil, true, err
	}
	out := make([][]admitted, len(items))
	for i, r := range res {
		if r.State != store.StateClaimed {
			continue
		}
		if out[i], err = parseAdmitted(redisstore.Appended{ID: replies[i]}, places[i], items[i].c.Key); err != nil {
			// stored all the same: the provider's retry finds them accepted
			return nil, nil, true, err
		}
	}
	return res, out, true, nil
}

// appendArgs are the keys and args of the accept script's append step
// (acceptLua) for places.
func appendArgs(places []placed) (keys []string, args []any) {
	args = []any{len(places)}
	for _, p := range places {
		parts := append([]*partition{p.target}, p.follow...)
		keys = append(keys, keysOf(parts...)...)
		args = append(args, p.group, len(parts), p.answer)
	}
	return keys, args
}

// parseAdmitted reads the accept script's reply: `<id> <where>
// <partition>` of each destination, joined by commas.
func parseAdmitted(a redisstore.Appended, places []placed, key string) ([]admitted, error) {
	reply := strings.Split(a.ID, ",")
	if len(reply) != len(places) {
		return nil, fmt.Errorf("accept: unexpected reply %q", a.ID)
	}
	suspected := ""
	if a.Noted != "" && a.Noted != key {
		suspected = a.Noted
	}
	out := make([]admitted, len(places))
	for i, r := range reply {
		f := strings.Fields(r)
		if len(f) != 3 {
			return nil, fmt.Errorf("accept: unexpected reply %q", a.ID)
		}
		n, _ := strconv.Atoi(f[2])
		p := places[i].target
		if n > 1 && n-2 < len(places[i].follow) {
			p = places[i].follow[n-2]
		}
		out[i] = admitted{id: f[0], lane: p.lane, answering: f[1] == "a", suspected: suspected}
	}
	return out, nil
}

// refuse undoes an acceptance that was not stored as the store's replicas
// require (docs/inbox.md#failover): the event is withdrawn unless a reader
// has taken it already, and the key is released, so that the provider's
// retry, which the 503 asks for, is accepted anew rather than answered as
// a duplicate. An event a reader took is delivered all the same, and the
// retry's too: the application gets it twice.
func (q *redisQueue) refuse(key, guard, owner string, ids []admitted, places []placed) {
	s := q.streams.Store()
	for i, a := range ids {
		if a.id == "" {
			continue
		}
		p := places[i]
		keys := keysOf(append([]*partition{p.target}, p.follow...)...)
		ctx, cancel := q.call(context.Background())
		n, err := withdrawScript.Run(ctx, q.client, keys, group, a.id, p.group).Int()
		cancel()
		switch {
		case err != nil:
			q.logger.Warn("withdrawing an event refused for want of replicas failed: it may be delivered, and the provider's retry too",
				zap.String("key", key), zap.String("id", a.id), zap.Error(err))
		case n == 0:
			q.logger.Info("an event refused for want of replicas was taken by a worker already: it is delivered, and the provider's retry too",
				zap.String("key", key), zap.String("id", a.id))
		}
	}
	_ = s.ReleaseGuarded(context.Background(), key, guard, owner)
}

// completeAccepted completes the key of an event that is stored: duplicates
// get the accept answer from now on.
func (q *redisQueue) completeAccepted(key, guard, owner string, record []byte) {
	if err := q.streams.Store().CompleteGuarded(context.Background(), key, guard, owner, record, q.acceptTTL); err != nil {
		// the event is stored, so it is accepted; only a duplicate arriving
		// after the lease could be accepted again
		q.logger.Warn("recording an accepted event's key failed; a duplicate may be accepted again",
			zap.String("key", key), zap.Error(err))
	}
}

// acceptCluster accepts on Redis Cluster, where the key and the streams
// live on different nodes: the key is claimed, the event stored in each
// destination's queue, and the key then completed.
func (q *redisQueue) acceptCluster(ctx context.Context, c store.Claim, record []byte, entry []any, places []placed) (store.ClaimResult, []admitted, error) {
	s := q.streams.Store()
	var res store.ClaimResult
	var err error
	key, guard, owner := c.Key, c.Guard, c.Owner
	completeGuard := c.CompletionGuard()
	suspected := ""
	if c.Noted {
		var prev string
		res, prev, err = s.ClaimNoted(ctx, key, guard, owner, q.accepting, q.noteTTL)
		if prev != "" && prev != key {
			suspected = prev
			entry = append(entry, fieldSuspected, prev)
		}
	} else {
		res, err = s.ClaimGuarded(ctx, key, guard, owner, q.accepting)
	}
	if err != nil || res.State != store.StateClaimed {
		return res, nil, err
	}
	ids := make([]admitted, len(places))
	for i, p := range places {
		e := entry
		if p.group != "" {
			e = append(slices.Clip(entry), fieldGroup, p.group)
		}
		id, where, part, err := p.q.appendTo(ctx, p.group, e, p.target, p.follow, true, p.answer)
		ids[i] = admitted{id: id, answering: where == "a", suspected: suspected}
		if part != nil {
			ids[i].lane = part.lane
		}
		if errors.Is(err, redisstore.ErrNotReplicated) {
			q.refuse(key, completeGuard, owner, ids, places)
			return store.ClaimResult{}, nil, err
		}
		if err != nil {
			q.refuse(key, completeGuard, owner, ids[:i], places)
			return store.ClaimResult{}, nil, fmt.Errorf("redis store: storing event: %w", err)
		}
	}
	q.completeAccepted(key, completeGuard, owner, record)
	return res, ids, nil
}

// appendTo admits an event to target, or to the partition of follow that
// holds its group's pending events: in one script where every key is on
// one node, else one partition after the other (Redis Cluster). It returns
// the event's id, where it went (admit) and its partition. An acceptance
// (accepting) waits for the store's `replicas`: the error then wraps
// redisstore.ErrNotReplicated when too few acknowledged it.
func (q *redisQueue) appendTo(ctx context.Context, grp string, entry []any, target *partition, follow []*partition, accepting bool, answer string) (string, string, *partition, error) {
	args := append([]any{grp, "", answer}, entry...)
	if !q.cluster {
		ctx, cancel := q.call(ctx)
		defer cancel()
		parts := append([]*partition{target}, follow...)
		v, err := appendScript.Run(ctx, q.client, keysOf(parts...), args...).Text()
		id, where, _ := strings.Cut(v, " ")
		return id, where, nil, err
	}
	for _, p := range follow {
		args[1] = "follow"
		id, where, err := q.appendOne(ctx, p, args, accepting)
		if !errors.Is(err, redis.Nil) {
			return id, where, p, err
		}
	}
	args[1] = ""
	id, where, err := q.appendOne(ctx, target, args, accepting)
	return id, where, target, err
}

// appendOne runs the append script on one partition (its keys on one
// node), waiting for the store's `replicas` when wait is set.
func (q *redisQueue) appendOne(ctx context.Context, p *partition, args []any, wait bool) (string, string, error) {
	if wait && q.streams.Replicas() > 0 {
		v, err := q.streams.RunReplicated(ctx, appendScript, p.keys, args...)
		if v == nil && err == nil {
			return "", "", redis.Nil
		}
		s, _ := v.(string)
		id, where, _ := strings.Cut(s, " ")
		return id, where, err
	}
	ctx, cancel := q.call(ctx)
	defer cancel()
	v, err := appendScript.Run(ctx, q.client, p.keys, args...).Text()
	id, where, _ := strings.Cut(v, " ")
	return id, where, err
}
