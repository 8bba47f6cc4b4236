package redisstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisBatcher sends the script calls of concurrent requests to Redis
// together. A call waits in a queue while the batches before it are in
// flight, and the next free worker takes every call that waited and sends
// them as one pipeline: one write and one read for all of them, where each
// call alone would cost its own (on a loaded host, system calls are most of
// what a Redis call costs Caddy and Redis). A call that finds a worker free
// goes out at once, alone, so an idle store adds no wait.
//
// Every call is still one command and one round trip of its own; nothing is
// merged or reordered within a call, and the scripts are atomic each. A call
// whose caller gave up before its batch was sent is not sent.
type redisBatcher struct {
	client  redis.UniversalClient
	timeout time.Duration // bound of one batch
	workers int           // batches in flight at most
	queue   chan *redisCall
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// redisCall is one call waiting for its batch: a script with keys and
// args, or with no script the command args.
type redisCall struct {
	ctx      context.Context
	deadline time.Time // the caller gives up then (zero: only ctx)
	script   *redis.Script
	keys     []string
	args     []any
	then     *redisThen // sent right after this call, in the same pipeline
	val      any
	err      error
	done     chan struct{} // buffered: the worker never waits for the caller
	timer    *time.Timer   // the caller's timeout, reused with the call

	// the follow-up's commands and reply, copied to then by run
	thenCmds []*redis.Cmd
	thenVal  any
	thenErr  error
}

// redisThen is commands that ride in the pipeline of a call, right after
// it, such as an archive append with the completion of its key. Their keys
// may be on another Redis Cluster slot: the pipeline sends each command to
// its node. The first command's reply, and the first error of any, are set
// when the call returns.
type redisThen struct {
	cmds [][]any
	val  any
	err  error
}

// Batching limits. Two workers let a batch go out while another waits for
// Redis (and a hung Redis hold at most two); more workers send smaller
// batches under load, which costs Caddy and Redis more system calls per
// call (see BENCHMARKS.md: with four, Redis spent 30 to 50 % more CPU per
// request). The queue holds the calls of the requests in progress.
var redisBatchWorkers = 2 // a variable for BenchmarkServeHTTPRedisParallel

const (
	redisBatchMax   = 128
	redisBatchQueue = 1024
)

var redisCallPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &redisCall{done: make(chan struct{}, 1), timer: t}
}}

func newRedisBatcher(client redis.UniversalClient, timeout time.Duration) *redisBatcher {
	b := &redisBatcher{
		client:  client,
		timeout: timeout,
		workers: redisBatchWorkers,
		queue:   make(chan *redisCall, redisBatchQueue),
		stop:    make(chan struct{}),
	}
	b.wg.Add(b.workers)
	for range b.workers {
		go b.work()
	}
	return b
}

// run runs script with keys and args (with a nil script, the command args)
// in the next batch and returns its reply, or ctx's error when ctx ends
// first, or context.DeadlineExceeded when timeout (if not zero) passes
// first. The timeout is a timer the call reuses, where a context with a
// deadline would cost a few allocations per call. then, when not nil, is
// sent right after the call in the same pipeline; its reply is set before
// run returns (its error says why when the call was not sent).
func (b *redisBatcher) run(ctx context.Context, timeout time.Duration, script *redis.Script, keys []string, args []any, then *redisThen) (any, error) {
	if then != nil {
		then.err = errRedisNotSent
	}
	c := redisCallPool.Get().(*redisCall)
	c.ctx, c.script, c.keys, c.args, c.then = ctx, script, keys, args, then
	var expired <-chan time.Time
	if timeout > 0 {
		c.deadline = time.Now().Add(timeout)
		c.timer.Reset(timeout)
		expired = c.timer.C
	}
	select {
	case b.queue <- c:
	case <-ctx.Done():
		c.recycle()
		return nil, ctx.Err()
	case <-expired:
		c.recycle()
		return nil, context.DeadlineExceeded
	case <-b.stop:
		c.recycle()
		return nil, redis.ErrClosed
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		// a worker may still hold c and finish it: it is not reused
		c.timer.Stop()
		if then != nil {
			then.err = ctx.Err()
		}
		return nil, ctx.Err()
	case <-expired:
		// as above
		if then != nil {
			then.err = context.DeadlineExceeded
		}
		return nil, context.DeadlineExceeded
	case <-b.stop:
		// the workers finish every call they took, then stop; a call still
		// queued then is never taken
		b.wg.Wait()
		select {
		case <-c.done:
		default:
			c.timer.Stop()
			return nil, redis.ErrClosed
		}
	}
	v, err := c.val, c.err
	c.settleThen()
	c.recycle() // the worker is done with it
	return v, err
}

// settleThen gives the call's follow-up, if it was sent, its reply.
func (c *redisCall) settleThen() {
	if c.then != nil && c.thenCmds != nil {
		c.then.val, c.then.err = c.thenVal, c.thenErr
	}
}

// recycle puts a call no worker holds back in the pool.
func (c *redisCall) recycle() {
	c.timer.Stop()
	c.ctx, c.deadline, c.script, c.keys, c.args, c.then, c.val, c.err = nil, time.Time{}, nil, nil, nil, nil, nil, nil
	c.thenCmds, c.thenVal, c.thenErr = nil, nil, nil
	redisCallPool.Put(c)
}

// gone returns the error of a call whose caller has given up, else nil.
func (c *redisCall) gone(now time.Time) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// errRedisNotSent is the error of a follow-up call whose first call was
// not sent.
var errRedisNotSent = errors.New("not sent: the call it follows was not sent")

func (c *redisCall) finish(v any, err error) {
	c.val, c.err = v, err
	c.done <- struct{}{}
}

// work sends batches until the batcher is closed.
func (b *redisBatcher) work() {
	defer b.wg.Done()
	batch := make([]*redisCall, 0, redisBatchMax)
	cmds := make([]*redis.Cmd, 0, redisBatchMax)
	for {
		select {
		case c := <-b.queue:
			batch = append(batch[:0], c)
		case <-b.stop:
			b.drain()
			return
		}
	fill:
		for len(batch) < redisBatchMax {
			select {
			case c := <-b.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		cmds = b.send(batch, cmds[:0])
		clear(batch)
		clear(cmds)
	}
}

// send sends one batch as a pipeline and finishes every call in it.
func (b *redisBatcher) send(batch []*redisCall, cmds []*redis.Cmd) []*redis.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	// scripts first: go-redis takes the first reply of a pipeline for the
	// pipeline's error, and a claim's nil reply (it claimed) would then be
	// checked as a failure, at a cost of a dozen allocations
	slices.SortStableFunc(batch, func(x, y *redisCall) int {
		return cmp.Compare(btoi(x.script == nil), btoi(y.script == nil))
	})
	pipe := b.client.Pipeline()
	now := time.Now()
	for _, c := range batch {
		if c.gone(now) != nil {
			cmds = append(cmds, nil) // its caller is gone: not sent
			continue
		}
		if c.script == nil {
			cmds = append(cmds, pipe.Do(ctx, c.args...))
			continue
		}
		cmds = append(cmds, c.script.EvalSha(ctx, pipe, c.keys, c.args...))
		if t := c.then; t != nil {
			c.thenCmds = make([]*redis.Cmd, len(t.cmds))
			for j, args := range t.cmds {
				c.thenCmds[j] = pipe.Do(ctx, args...)
			}
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // each command carries its own error
	}
	for i, c := range batch {
		if cmds[i] == nil {
			c.finish(nil, c.gone(now))
			continue
		}
		v, err := b.result(ctx, cmds[i], c.script, c.keys, c.args)
		if c.thenCmds != nil {
			c.thenVal, c.thenErr = c.thenCmds[0].Result()
			for _, cmd := range c.thenCmds[1:] {
				if err := cmd.Err(); err != nil && c.thenErr == nil {
					c.thenErr = err
				}
			}
		}
		c.finish(v, err)
	}
	return cmds
}

// result is the reply of a command sent in a pipeline. When Redis lost a
// script (a restart, SCRIPT FLUSH), EVAL loads the script and runs it.
func (b *redisBatcher) result(ctx context.Context, cmd *redis.Cmd, script *redis.Script, keys []string, args []any) (any, error) {
	v, err := cmd.Result()
	if err != nil && script != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		v, err = script.Eval(ctx, b.client, keys, args...).Result()
	}
	return v, err
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// drain fails the calls still queued when the batcher closes.
func (b *redisBatcher) drain() {
	for {
		select {
		case c := <-b.queue:
			c.finish(nil, redis.ErrClosed)
		default:
			return
		}
	}
}

// close stops the workers; calls still queued fail with redis.ErrClosed.
func (b *redisBatcher) close() {
	b.stopped.Do(func() { close(b.stop) })
	b.wg.Wait()
}
