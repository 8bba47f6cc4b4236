package archive

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// openRedisArchive provisions a redis store on addr and builds an archive
// of cfg on it; both are stopped when the test ends.
func openRedisArchive(t *testing.T, addr string, cfg Config) *Archive {
	t.Helper()
	ctx, cancel := testkit.NewContext(t)
	s := &redisstore.Store{Addresses: []string{addr}, Timeout: caddy.Duration(5 * time.Second)}
	if err := s.Provision(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	a, err := New(cfg, s)
	if err != nil {
		_ = s.Cleanup()
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Stop()
		_ = s.Cleanup()
		cancel()
	})
	return a
}

// redisUsedMemory returns INFO memory's used_memory of the server.
func redisUsedMemory(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info := rc.Info(t.Context(), "memory").Val()
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in %q", info)
	return 0
}

// TestArchiveRedisTrimming: an archive of max_events 1000 takes ten
// thousand appends through the store's own path, then a million more of
// the same commands run inside Redis (so that the test takes seconds, not
// minutes: the network and the client are not what is measured), and
// holds about 1000 events, with Redis's memory where it was after the
// first ten thousand; once every event is older than retention, the next
// append trims them away.
func TestArchiveRedisTrimming(t *testing.T) {
	srv := testkit.StartRedis(t)
	a := openRedisArchive(t, srv.Addr(), Config{Source: "trim", Retention: time.Hour, MaxEvents: 1000, Bodies: true})
	b := a.backend.(*redisBackend)
	entry := &Entry{
		Request: event.Request{
			Received: time.Now(), Source: "trim", Key: "evt", Method: "POST", URI: "/hook",
			Headers: "Content-Type: application/json\r\n", Body: []byte(strings.Repeat("x", 200)),
		},
		Result: "new", Status: 200, HasBody: true,
	}
	batch := make([]*Entry, 1000)
	for i := range batch {
		batch[i] = entry
	}
	for range 10 {
		if err := a.backend.appendBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	stream := "{idem:trim}:archive"
	rc := srv.Client(t)
	if n := rc.XLen(t.Context(), stream).Val(); n < 1000 || n > 1100 {
		t.Fatalf("after 10,000 appends the archive holds %d events, want about 1000", n)
	}

	// the store's own append script, run n times per call
	loop := redis.NewScript(`
local function add(KEYS, ARGV)
` + redisAppendLua + `
end
local n, args = tonumber(ARGV[1]), {unpack(ARGV, 2)}
for i = 1, n do
	add(KEYS, args)
end
return n`)
	cmd := b.appendCmd(entry)
	if cmd[0] != "EVAL" || cmd[2] != 2 {
		t.Fatalf("append command: %v", cmd[:3])
	}
	keys := []string{cmd[3].(string), cmd[4].(string)}
	args := append([]any{25_000}, cmd[5:]...)
	// a loaded machine may take seconds per call: no read timeout, no retry
	// (a retried call would find Redis busy with the first)
	slow := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = slow.Close() })
	before := redisUsedMemory(t, rc)
	start := time.Now()
	for range 40 {
		if err := loop.Run(t.Context(), slow, keys, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	after := redisUsedMemory(t, rc)
	n := rc.XLen(t.Context(), stream).Val()
	t.Logf("1,000,000 appends in %s; used_memory %d before, %d after (%+d bytes); %d events kept", took, before, after, after-before, n)
	// trimming is by whole stream nodes of 100 entries
	if n < 1000 || n > 1100 {
		t.Fatalf("the archive holds %d events, want about 1000", n)
	}
	if after-before > 1<<20 {
		t.Fatalf("used_memory grew by %d bytes over a million appends", after-before)
	}
	// no body outlives its event
	if nb := rc.XLen(t.Context(), stream+":body").Val(); nb != n {
		t.Fatalf("the body stream holds %d bodies for %d events", nb, n)
	}

	// every event is older than retention: the next append trims them
	clock := useFakeClock(t)
	clock.nanos.Store(time.Now().Add(2 * time.Hour).UnixNano())
	if err := a.backend.appendBatch(context.Background(), batch[:1]); err != nil {
		t.Fatal(err)
	}
	if n := rc.XLen(t.Context(), stream).Val(); n > 100 {
		t.Fatalf("after retention the archive holds %d events", n)
	}
}
