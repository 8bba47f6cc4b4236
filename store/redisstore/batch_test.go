package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// pipelineCounter counts the pipelines of script calls a client sends and
// the commands in them.
type pipelineCounter struct {
	pipelines, commands atomic.Int64
}

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "incrby") { // not a connection's handshake
			p.pipelines.Add(1)
			p.commands.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

var batchTestScript = redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)

// Concurrent calls, scripts and plain commands, share pipelines, and each
// gets its own reply.
func TestRedisBatcherSharesPipelinesAndKeepsReplies(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	client := srv.Client(t)
	counter := new(pipelineCounter)
	client.AddHook(counter)
	b := newRedisBatcher(client, 2*time.Second)
	defer b.close()

	const callers, calls = 64, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("batch:%d", g)
			for i := 1; i <= calls; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				// half the callers send a plain command, half a script
				var v any
				var err error
				if g%2 == 0 {
					v, err = b.run(ctx, 0, nil, nil, []any{"incrby", key, g + 1}, nil)
				} else {
					v, err = b.run(ctx, 0, batchTestScript, []string{key}, []any{g + 1}, nil)
				}
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if want := int64(i * (g + 1)); v != want {
					errs <- fmt.Errorf("caller %d call %d: reply %v, want %d (another call's reply?)", g, i, v, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p, c := counter.pipelines.Load(), counter.commands.Load()
	if c != callers*calls {
		t.Fatalf("%d commands sent, want %d", c, callers*calls)
	}
	if p >= c {
		t.Fatalf("%d commands went out in %d pipelines: concurrent calls were not batched", c, p)
	}
	t.Logf("%d commands in %d pipelines (%.1f per pipeline)", c, p, float64(c)/float64(p))
}

// A call alone goes out at once, and scripts Redis lost are loaded again.
func TestRedisBatcherAloneAndAfterScriptFlush(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	client := srv.Client(t)
	b := newRedisBatcher(client, 2*time.Second)
	defer b.close()
	ctx := context.Background()
	for i, want := range []int64{5, 10} {
		if i == 1 {
			if err := client.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		v, err := b.run(ctx, 0, batchTestScript, []string{"alone"}, []any{5}, nil)
		if err != nil || v != want {
			t.Fatalf("call %d: %v, %v; want %d", i+1, v, err, want)
		}
	}
}

// A call whose caller has given up is not sent; with Redis hung, a caller
// waits for its own deadline, not for the batch's; a closed batcher fails
// its calls.
func TestRedisBatcherAbandonedCallsAndClose(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	client := srv.Client(t)
	// a batch's bound far beyond the callers' deadline (100ms), so that a
	// caller held for the batch's is told from one that returns at its own
	// however slow the machine
	const batchBound = 30 * time.Second
	b := newRedisBatcher(client, batchBound)
	ctx := context.Background()

	gone, cancel := context.WithCancel(ctx)
	cancel()
	for range 200 {
		if _, err := b.run(gone, 0, batchTestScript, []string{"abandoned"}, []any{1}, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("call of a caller that gave up: %v, want context.Canceled", err)
		}
	}
	// a live call after them: every earlier one was dropped or sent by now
	if v, err := b.run(ctx, 0, batchTestScript, []string{"abandoned"}, []any{1}, nil); err != nil || v != int64(1) {
		t.Fatalf("calls of callers that had given up reached Redis: INCRBY gave %v (%v), want 1", v, err)
	}

	srv.Pause()
	var wg sync.WaitGroup
	for i := range 3 * b.workers {
		wg.Go(func() {
			// half the callers bound their call with a context, half with
			// the batcher's timeout (as the store does)
			cctx, timeout := ctx, 100*time.Millisecond
			if i%2 == 0 {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
				timeout = 0
			}
			start := time.Now()
			_, err := b.run(cctx, timeout, batchTestScript, []string{"hung"}, []any{1}, nil)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("call %d with Redis hung: %v, want the caller's deadline", i, err)
			}
			if d := time.Since(start); d > batchBound/3 {
				t.Errorf("call %d with Redis hung returned after %v; its deadline was 100ms, the batch's %v", i, d, batchBound)
			}
		})
	}
	wg.Wait()
	srv.Resume()

	b.close()
	if _, err := b.run(ctx, 0, batchTestScript, []string{"closed"}, []any{1}, nil); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("call on a closed batcher: %v, want redis.ErrClosed", err)
	}
}
