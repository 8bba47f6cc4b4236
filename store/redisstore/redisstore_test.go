package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The redis store's own behaviour, beyond the contract suite
// (contract_test.go): the values and expiries it leaves in Redis, corrupt
// and foreign values, clients shared across reloads through the
// UsagePool, passwords from placeholders kept out of keys, errors and
// logs, the breaker, a Redis down at provision, and the Caddyfile. Every
// test runs its own redis-server.

// provisionRedisStore provisions a RedisStore from its JSON config, as
// Caddy would, and cleans it up when the test ends. A config without a
// timeout gets one a loaded machine's answers come within: the default,
// 500ms, does not, and a late answer would fail the test (three open the
// breaker).
func provisionRedisStore(t testing.TB, cfg string) *Store {
	t.Helper()
	s := new(Store)
	if err := json.Unmarshal([]byte(cfg), s); err != nil {
		t.Fatalf("decoding %s: %v", cfg, err)
	}
	if s.Timeout == 0 {
		s.Timeout = caddy.Duration(10 * time.Second)
	}
	ctx, cancel := testkit.NewContext(t)
	t.Cleanup(cancel)
	if err := s.Provision(ctx); err != nil {
		t.Fatalf("provisioning redis store: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("validating redis store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

// testRecord is an encoded record for status 201 with a small body.
func testRecord(body string) []byte {
	var hash [32]byte
	rec := record.Encode(nil, http.StatusCreated, http.Header{"Content-Type": {"text/plain"}}, &hash)
	return append(rec, body...)
}

func TestRedisStoreClaimCompleteReplay(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	rc := srv.Client(t)
	ctx := context.Background()
	key := "idem:test:evt_1"

	res, err := s.Claim(ctx, key, "owner-a", 30*time.Second)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("first claim: %v, %v", res.State, err)
	}
	// the in-flight value: marker 0x00 0x01 and the owner, with the lease
	if v, _ := rc.Get(ctx, key).Result(); v != "\x00\x01owner-a" {
		t.Fatalf("in-flight value %q", v)
	}
	if pttl := rc.PTTL(ctx, key).Val(); pttl <= 20*time.Second || pttl > 30*time.Second {
		t.Fatalf("in-flight PTTL %v, want about 30s", pttl)
	}

	res, err = s.Claim(ctx, key, "owner-b", 30*time.Second)
	if err != nil || res.State != store.StateInFlight {
		t.Fatalf("duplicate claim: %v, %v", res.State, err)
	}
	if res.LeaseLeft <= 20*time.Second || res.LeaseLeft > 30*time.Second {
		t.Fatalf("lease left %v, want about 30s", res.LeaseLeft)
	}
	if err := s.Complete(ctx, key, "owner-b", testRecord("no"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("completion by a non-owner: %v, want ErrNotOwner", err)
	}

	rec := testRecord("hello")
	if err := s.Complete(ctx, key, "owner-a", rec, time.Hour); err != nil {
		t.Fatalf("complete: %v", err)
	}
	// a retried completion with the same record is not an error
	if err := s.Complete(ctx, key, "owner-a", rec, time.Hour); err != nil {
		t.Fatalf("retried complete: %v", err)
	}
	if v, _ := rc.Get(ctx, key).Bytes(); string(v) != string(rec) || v[0] != record.Version {
		t.Fatalf("completed value %q, want the record", v)
	}
	if pttl := rc.PTTL(ctx, key).Val(); pttl <= 59*time.Minute || pttl > time.Hour {
		t.Fatalf("completed PTTL %v, want about 1h", pttl)
	}

	res, err = s.Claim(ctx, key, "owner-c", 30*time.Second)
	if err != nil || res.State != store.StateCompleted {
		t.Fatalf("claim of a completed key: %v, %v", res.State, err)
	}
	got, err := record.Decode(res.Record)
	if err != nil || got.Status != http.StatusCreated || string(got.Body) != "hello" {
		t.Fatalf("replayed record: %+v, %v", got, err)
	}
	if err := s.Release(ctx, key, "owner-a"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("release of a completed key: %v, want ErrNotOwner", err)
	}
}

func TestRedisStoreReleaseAndRenew(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	rc := srv.Client(t)
	ctx := context.Background()
	key := "idem:test:evt_2"

	if res, err := s.Claim(ctx, key, "a", time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v, %v", res.State, err)
	}
	if err := s.Renew(ctx, key, "a", time.Minute); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if pttl := rc.PTTL(ctx, key).Val(); pttl <= 50*time.Second {
		t.Fatalf("PTTL after renew %v, want about 1m", pttl)
	}
	if err := s.Renew(ctx, key, "b", time.Minute); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("renew by a non-owner: %v", err)
	}
	if err := s.Release(ctx, key, "b"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("release by a non-owner: %v", err)
	}
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := rc.Exists(ctx, key).Val(); n != 0 {
		t.Fatal("released key still exists")
	}
	if res, err := s.Claim(ctx, key, "b", time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim after release: %v, %v", res.State, err)
	}
}

// An owner whose lease expired cannot complete, release or renew a key
// that another request claimed since.
func TestRedisStoreExpiredOwnerCannotTouchNewOwner(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	rc := srv.Client(t)
	ctx := context.Background()
	key := "idem:test:evt_3"

	if res, err := s.Claim(ctx, key, "old", 100*time.Millisecond); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v, %v", res.State, err)
	}
	time.Sleep(250 * time.Millisecond)
	if err := s.Complete(ctx, key, "old", testRecord("late"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("completion after the lease expired: %v, want ErrNotOwner", err)
	}
	if res, err := s.Claim(ctx, key, "new", 30*time.Second); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim after expiry: %v, %v", res.State, err)
	}
	if err := s.Complete(ctx, key, "old", testRecord("late"), time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("old owner completes: %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, key, "old"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("old owner releases: %v, want ErrNotOwner", err)
	}
	if err := s.Renew(ctx, key, "old", time.Hour); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("old owner renews: %v, want ErrNotOwner", err)
	}
	if v := rc.Get(ctx, key).Val(); v != "\x00\x01new" {
		t.Fatalf("value after the old owner's attempts: %q, want the new owner's claim", v)
	}
	if err := s.Complete(ctx, key, "new", testRecord("fresh"), time.Hour); err != nil {
		t.Fatalf("new owner completes: %v", err)
	}
}

// Corrupt or foreign values are logged and treated as absent.
func TestRedisStoreCorruptValues(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"]}`)
	core, logs := observer.New(zap.WarnLevel)
	s.logger = zap.New(core)
	rc := srv.Client(t)
	ctx := context.Background()

	// a record header that looks right but whose header block is broken
	broken := testRecord("x")
	broken[record.FixedLen] = 0x7f
	cases := map[string]func(key string) error{
		"garbage":        func(key string) error { return rc.Set(ctx, key, "garbage", 0).Err() },
		"empty":          func(key string) error { return rc.Set(ctx, key, "", 0).Err() },
		"short record":   func(key string) error { return rc.Set(ctx, key, "\x01\x00\x00", 0).Err() },
		"broken record":  func(key string) error { return rc.Set(ctx, key, broken, 0).Err() },
		"other version":  func(key string) error { return rc.Set(ctx, key, "\x00\x02owner", time.Minute).Err() },
		"marker no ttl":  func(key string) error { return rc.Set(ctx, key, "\x00\x01owner", 0).Err() },
		"hash":           func(key string) error { return rc.HSet(ctx, key, "f", "v").Err() },
		"list":           func(key string) error { return rc.RPush(ctx, key, "v").Err() },
		"unknown format": func(key string) error { return rc.Set(ctx, key, "\x02"+strings.Repeat("z", 64), 0).Err() },
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			key := "idem:test:corrupt:" + name
			if err := set(key); err != nil {
				t.Fatal(err)
			}
			before := logs.Len()
			res, err := s.Claim(ctx, key, "me", time.Minute)
			if err != nil || res.State != store.StateClaimed {
				t.Fatalf("claim over a corrupt value: %v, %v", res.State, err)
			}
			if logs.Len() != before+1 || !strings.Contains(logs.All()[before].Message, "corrupt") {
				t.Fatalf("want one WARN about a corrupt value, got %d new entries", logs.Len()-before)
			}
			if v := rc.Get(ctx, key).Val(); v != "\x00\x01me" {
				t.Fatalf("value after claim: %q", v)
			}
			if err := s.Complete(ctx, key, "me", testRecord("ok"), time.Minute); err != nil {
				t.Fatalf("complete: %v", err)
			}
		})
	}

	// owner-checked calls on a foreign value change nothing
	if err := rc.HSet(ctx, "idem:test:foreign", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "idem:test:foreign", "me"); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("release of a foreign value: %v", err)
	}
	if err := s.Complete(ctx, "idem:test:foreign", "me", testRecord("x"), time.Minute); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("complete of a foreign value: %v", err)
	}
}

// Clients are shared by every configuration with the same connection
// settings, and closed only when the last one is cleaned up.
func TestRedisStoreClientSharedAcrossReloads(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	ctx := context.Background()
	cfg := `{"addresses":["` + srv.Addr() + `"],"pool_size":3}`

	load := func(cfg string) (*Store, func()) {
		s := new(Store)
		if err := json.Unmarshal([]byte(cfg), s); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := testkit.NewContext(t)
		if err := s.Provision(cctx); err != nil {
			t.Fatal(err)
		}
		return s, func() {
			if err := s.Cleanup(); err != nil {
				t.Errorf("cleanup: %v", err)
			}
			cancel()
		}
	}

	first, cleanupFirst := load(cfg)
	if _, err := first.Claim(ctx, "idem:test:shared", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	conns := redisClientCount(t, rc)

	// a reload: the new config is provisioned before the old is cleaned up
	second, cleanupSecond := load(cfg)
	defer cleanupSecond()
	if second.client != first.client {
		t.Fatal("an unchanged config got a new client")
	}
	cleanupFirst()
	if _, err := second.Claim(ctx, "idem:test:shared", "b", time.Minute); err != nil {
		t.Fatalf("claim after the old config's cleanup: %v", err)
	}
	if got := redisClientCount(t, rc); got != conns {
		t.Fatalf("connections after an unchanged reload: %d, want %d", got, conns)
	}

	// any changed connection setting gets its own client
	for _, other := range []string{
		`{"addresses":["` + srv.Addr() + `"],"pool_size":4}`,
		`{"addresses":["` + srv.Addr() + `"],"pool_size":3,"db":1}`,
		`{"addresses":["` + srv.Addr() + `"],"pool_size":3,"password":"x"}`,
		`{"addresses":["` + srv.Addr() + `"],"pool_size":3,"timeout":1000000000}`,
		`{"url":"redis://` + srv.Addr() + `/2","pool_size":3}`,
	} {
		s, cleanup := load(other)
		if s.client == second.client {
			t.Errorf("config %s shares the client of %s", other, cfg)
		}
		cleanup()
	}

	// the key prefix is not a connection setting
	third, cleanupThird := load(`{"addresses":["` + srv.Addr() + `"],"pool_size":3,"key_prefix":"other"}`)
	if third.client != second.client || third.KeyPrefix() != "other" || second.KeyPrefix() != "idem" {
		t.Fatal("a different key_prefix must share the client and keep its own prefix")
	}
	cleanupThird()
}

// redisClientCount counts the store's connections in CLIENT LIST.
func redisClientCount(t testing.TB, rc *redis.Client) int {
	t.Helper()
	list, err := rc.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	return strings.Count(list, "name="+redisClientName+" ")
}

func TestRedisStorePasswordFromPlaceholders(t *testing.T) {
	// not parallel: t.Setenv
	srv := testkit.StartRedis(t, "--requirepass", "s3cret-pw")
	t.Setenv("WEBHOOK_TEST_REDIS_PW", "s3cret-pw")
	ctx := context.Background()

	s := provisionRedisStore(t, `{"addresses":["`+srv.Addr()+`"],"password":"{env.WEBHOOK_TEST_REDIS_PW}"}`)
	if res, err := s.Claim(ctx, "idem:test:pw", "a", time.Minute); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim with the password from {env.*}: %v, %v", res.State, err)
	}
	if strings.Contains(s.ref.Key(), "s3cret-pw") {
		t.Fatal("the pool key holds the password")
	}

	u := provisionRedisStore(t, `{"url":"redis://:{env.WEBHOOK_TEST_REDIS_PW}@`+srv.Addr()+`"}`)
	if res, err := u.Claim(ctx, "idem:test:pw", "b", time.Minute); err != nil || res.State != store.StateInFlight {
		t.Fatalf("claim with the password from the URL: %v, %v", res.State, err)
	}

	// a wrong password is an error that does not name the password
	core, logs := observer.New(zap.WarnLevel)
	w := new(Store)
	w.Addresses = []string{srv.Addr()}
	w.Password = "wrong-pw"
	if err := w.provisionWith(zap.New(core)); err != nil {
		t.Fatalf("provision must not fail when Redis refuses: %v", err)
	}
	defer w.Cleanup()
	_, err := w.Claim(ctx, "idem:test:pw", "c", time.Minute)
	if err == nil {
		t.Fatal("claim with a wrong password succeeded")
	}
	for _, text := range append([]string{err.Error()}, redisLogTexts(logs)...) {
		if strings.Contains(text, "wrong-pw") || strings.Contains(text, "s3cret-pw") {
			t.Fatalf("a password leaked: %s", text)
		}
	}
}

func redisLogTexts(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, e.Message)
		for k, v := range e.ContextMap() {
			out = append(out, k+"="+strings.TrimSpace(strings.ReplaceAll(redisJSON(v), "\n", " ")))
		}
	}
	return out
}

func redisJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The breaker: once Redis stops answering, calls fail at once instead of
// waiting for the timeout, and the store comes back on its own.
func TestRedisStoreBreaker(t *testing.T) {
	t.Parallel()
	srv := testkit.StartRedis(t)
	// a timeout the answers of a loaded machine come within; a call to the
	// paused server waits it out, and no longer
	const timeout = time.Second
	s := provisionRedisStore(t, fmt.Sprintf(`{"addresses":["%s"],"timeout":%d}`, srv.Addr(), timeout))
	ctx := context.Background()
	if _, err := s.Claim(ctx, "idem:test:b0", "a", time.Minute); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	defer srv.Resume()
	for i := range breakerThreshold {
		start := time.Now()
		if _, err := s.Claim(ctx, "idem:test:b1", "a", time.Minute); err == nil {
			t.Fatalf("claim %d succeeded on a paused server", i)
		}
		if d := time.Since(start); d > 10*timeout {
			t.Fatalf("claim %d took %v with a %v timeout", i, d, timeout)
		}
	}
	_, err := s.Claim(ctx, "idem:test:b1", "a", time.Minute)
	if !errors.Is(err, errRedisBreakerOpen) {
		t.Fatalf("after %d failures: %v, want the breaker open", breakerThreshold, err)
	}
	for _, call := range []func() error{
		func() error { return s.Complete(ctx, "k", "a", testRecord("x"), time.Minute) },
		func() error { return s.Release(ctx, "k", "a") },
		func() error { return s.Renew(ctx, "k", "a", time.Minute) },
	} {
		if err := call(); !errors.Is(err, errRedisBreakerOpen) {
			t.Fatalf("owner call with the breaker open: %v", err)
		}
	}

	srv.Resume()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.Claim(ctx, "idem:test:b2", "a", time.Minute)
		if err == nil && res.State == store.StateClaimed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A Redis that is down at provision time is not fatal, and the breaker
// opens at once; Cleanup stops its probe.
func TestRedisStoreProvisionWhileDown(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	core, logs := observer.New(zap.WarnLevel)
	s := new(Store)
	s.Addresses = []string{"127.0.0.1:" + strconv.Itoa(port)}
	start := time.Now()
	if err := s.provisionWith(zap.New(core)); err != nil {
		t.Fatalf("provision with Redis down: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("provision took %v", d)
	}
	if logs.FilterMessageSnippet("unreachable").Len() == 0 {
		t.Fatal("no WARN about the unreachable Redis")
	}
	if _, err := s.Claim(context.Background(), "idem:test:x", "a", time.Minute); !errors.Is(err, errRedisBreakerOpen) {
		t.Fatalf("claim with Redis down: %v, want the breaker open", err)
	}
	c := s.client
	if err := s.Cleanup(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.nodes.one.breaker.stop:
	default:
		t.Fatal("cleanup did not stop the breaker")
	}
}

func TestRedisStoreCaddyfile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		input string
		want  string // JSON, or an error fragment after "error: "
	}{
		{`redis`, `{}`},
		{`redis redis://localhost:6379/2`, `{"url":"redis://localhost:6379/2"}`},
		{`redis {env.REDIS_URL}`, `{"url":"{env.REDIS_URL}"}`},
		{`redis {
			address a:1 b:2
			address c:3
			username u
			password {env.REDIS_PASSWORD}
			db 3
			master_name mymaster
			tls
			key_prefix wh
			timeout 250ms
			pool_size 7
		}`, `{"addresses":["a:1","b:2","c:3"],"username":"u","password":"{env.REDIS_PASSWORD}","db":3,"master_name":"mymaster","tls":true,"key_prefix":"wh","timeout":250000000,"pool_size":7}`},
		{`redis http://x`, `error: invalid redis url 'http://x'`},
		{`redis redis://u:pw@host:1 extra`, `error: store redis takes exactly one value, got 2`},
		{"redis {\naddress\n}", `error: redis store 'address' needs at least one value`},
		{"redis {\naddress nope\n}", `error: invalid redis address 'nope'`},
		{"redis {\ndb -1\n}", `error: invalid db '-1'`},
		{"redis {\npool_size 0\n}", `error: invalid pool_size '0'`},
		{"redis {\ntimeout soon\n}", `error: invalid timeout 'soon'`},
		{"redis {\ntimeout 0s\n}", `error: invalid timeout '0s'`},
		{"redis {\ntls yes\n}", `error: redis store 'tls' takes no value, got 1`},
		{"redis {\nusername\n}", `error: redis store 'username' takes exactly one value, got 0`},
		{"redis {\nbogus 1\n}", `error: unrecognized redis store subdirective 'bogus'`},
		{"redis {\nreplicas 1\n}", `{"replicas":1}`},
		{"redis {\nreplicas 2 2s\n}", `{"replicas":2,"replicas_timeout":2000000000}`},
		{"redis {\nreplicas 1 completions\n}", `{"replicas":1,"replicas_completions":true}`},
		{"redis {\nreplicas 1 250ms completions\n}", `{"replicas":1,"replicas_timeout":250000000,"replicas_completions":true}`},
		{"redis {\nreplicas 0\n}", `error: invalid replicas '0'`},
		{"redis {\nreplicas\n}", `error: redis store 'replicas' needs at least one value`},
		{"redis {\nreplicas 1 soon\n}", `error: invalid replicas timeout 'soon'`},
		{"redis {\nreplicas 1 1s 2s\n}", `error: replicas takes <n> [<timeout>] [completions], got 3 values`},
	} {
		s := new(Store)
		err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if frag, ok := strings.CutPrefix(tc.want, "error: "); ok {
			if err == nil || !strings.Contains(err.Error(), frag) {
				t.Errorf("%s: error %v, want %q", tc.input, err, frag)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.input, err)
			continue
		}
		got, _ := json.Marshal(s)
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.input, got, tc.want)
		}
	}

	// an invalid URL never shows its password
	err := new(Store).UnmarshalCaddyfile(caddyfile.NewTestDispenser(`redis http://u:topsecret@x`))
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("error %v must exist and hide the password", err)
	}
}

func TestRedisStoreProvisionErrors(t *testing.T) {
	t.Parallel()
	for cfg, want := range map[string]string{
		`{"addresses":["a:1","b:2"],"db":1}`:     "Cluster has database 0 only",
		`{"url":"http://localhost"}`:             "must start with redis://",
		`{"url":"redis://localhost?db=2"}`:       "query parameters",
		`{"addresses":["nope"]}`:                 "invalid address",
		`{"replicas_completions":true}`:          "replicas_completions needs replicas",
		`{"replicas":-1}`:                        "must not be negative",
		`{"db":-1}`:                              "db must not be negative",
		`{"pool_size":-1}`:                       "pool_size must not be negative",
		`{"key_prefix":"a b"}`:                   "white space",
		`{"key_prefix":"idem:a"}`:                `invalid key_prefix "idem:a": it must not contain ':'`,
		`{"key_prefix":"{idem}"}`:                `invalid key_prefix "{idem}"`,
		`{"url":"redis://:hunter2@x:1:2:3/abc"}`: "invalid url",
	} {
		s := new(Store)
		if err := json.Unmarshal([]byte(cfg), s); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := testkit.NewContext(t)
		err := s.Provision(ctx)
		cancel()
		if err == nil {
			_ = s.Cleanup()
			t.Errorf("%s: provisioned, want error %q", cfg, want)
			continue
		}
		if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %q, want %q and no password", cfg, err, want)
		}
	}
}
