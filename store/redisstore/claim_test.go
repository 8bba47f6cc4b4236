package redisstore

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// commandLog records the commands a client sends in pipelines (the store's
// calls all go out that way), by name.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		for _, c := range cmds {
			if n := c.Name(); n == "set" || n == "evalsha" || n == "eval" {
				l.names = append(l.names, n)
			}
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *commandLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.names
	l.names = nil
	return n
}

// A claim of an absent key and a claim of a completed key (a replay) are one
// command each, SET with NX and GET, no script; a claim of a key in flight
// takes the claim script after it, for the lease left.
func TestRedisClaimOneCommand(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	log := new(commandLog)
	s.client.client.AddHook(log)
	ctx := context.Background()
	key := "idem:test:one-command"

	check := func(what string, want ...string) {
		t.Helper()
		got := log.take()
		if len(got) != len(want) {
			t.Fatalf("%s: commands %v, want %v", what, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: commands %v, want %v", what, got, want)
			}
		}
	}
	if res, err := s.Claim(ctx, key, "owner-a", 30*time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v, %v", res.State, err)
	}
	check("claim of an absent key", "set")
	res, err := s.Claim(ctx, key, "owner-b", 30*time.Second)
	if err != nil || res.State != store.StateInFlight || res.LeaseLeft <= 20*time.Second {
		t.Fatalf("claim of a key in flight: %v, lease left %v, %v", res.State, res.LeaseLeft, err)
	}
	check("claim of a key in flight", "set", "evalsha")
	if err := s.Complete(ctx, key, "owner-a", testRecord("hello"), time.Hour); err != nil {
		t.Fatal(err)
	}
	log.take()
	if res, err := s.Claim(ctx, key, "owner-c", 30*time.Second); err != nil || res.State != store.StateCompleted {
		t.Fatalf("claim of a completed key: %v, %v", res.State, err)
	}
	check("claim of a completed key", "set")
}

// A Redis that rejects SET with NX and GET (older than 7.0) is claimed
// with the claim script alone, with the same results.
func TestRedisClaimWithoutSetGet(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	s.client.setGetUnsupported.Store(true)
	log := new(commandLog)
	s.client.client.AddHook(log)
	ctx := context.Background()
	key := "idem:test:script-only"

	if res, err := s.Claim(ctx, key, "owner-a", 30*time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v, %v", res.State, err)
	}
	if res, err := s.Claim(ctx, key, "owner-b", 30*time.Second); err != nil || res.State != store.StateInFlight || res.LeaseLeft <= 20*time.Second {
		t.Fatalf("claim of a key in flight: %v, lease left %v, %v", res.State, res.LeaseLeft, err)
	}
	if err := s.Complete(ctx, key, "owner-a", testRecord("hello"), time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, key, "owner-c", 30*time.Second)
	if err != nil || res.State != store.StateCompleted {
		t.Fatalf("claim of a completed key: %v, %v", res.State, err)
	}
	for _, n := range log.take() {
		if n == "set" {
			t.Fatal("a SET went out although Redis rejects SET with NX and GET")
		}
	}
}

// A duration given to commands again is formatted and boxed once: the
// argument is the one made the first time, and making it again allocates
// nothing; durations that share a slot of the cache each get their own
// value.
func TestRedisMillisArgIsKept(t *testing.T) {
	lease, ttl := 30*time.Second, 24*time.Hour
	first := redisMillisArg(lease)
	if first != "30000" || redisMillisArg(ttl) != "86400000" || redisMillisArg(time.Microsecond) != "1" {
		t.Fatalf("arguments %v, %v, %v; want 30000, 86400000, 1", first, redisMillisArg(ttl), redisMillisArg(time.Microsecond))
	}
	if n := testing.AllocsPerRun(100, func() { _ = redisMillisArg(lease) }); n != 0 {
		t.Fatalf("an argument made again allocates %.1f times, want 0", n)
	}
	// every whole second up to 64 s: four for each slot on average
	for round := range 2 {
		for s := 1; s <= 64; s++ {
			d := time.Duration(s) * time.Second
			if got, want := redisMillisArg(d), strconv.Itoa(s*1000); got != want {
				t.Fatalf("round %d: the argument of %v is %v, want %s", round, d, got, want)
			}
		}
	}
}
