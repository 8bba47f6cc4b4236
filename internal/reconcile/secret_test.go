package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The provider's key or token is never logged, stored or shown: these
// helpers look for it in every log line (at DEBUG), every error, the
// status the admin API shows, and every value the store holds.

// logCapture records every log entry a reconciler writes.
type logCapture struct {
	logger *zap.Logger
	obs    *observer.ObservedLogs
}

func captureLogs() *logCapture {
	core, obs := observer.New(zap.DebugLevel)
	return &logCapture{logger: zap.New(core), obs: obs}
}

// text is every entry, its message and fields written out.
func (l *logCapture) text() string {
	var b strings.Builder
	for _, e := range l.obs.All() {
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range e.Context {
			f.AddTo(enc)
		}
		fmt.Fprintf(&b, "%s %s %v\n", e.Level, e.Message, enc.Fields)
	}
	return b.String()
}

// storeText is every value the store holds: the bytes of a file store's
// files, or every value of every key of a Redis.
func storeText(t *testing.T, s Store) string {
	t.Helper()
	switch s := s.(type) {
	case *filestore.Store:
		var b strings.Builder
		dir := filepath.Dir(s.Path)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				b.Write(data)
			}
		}
		return b.String()
	case *redisstore.Store:
		return redisText(t, s.Addresses[0])
	}
	t.Fatalf("cannot read the values of a %T", s)
	return ""
}

// redisText reads every key of the Redis the store uses, by type.
func redisText(t *testing.T, addr string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	var b strings.Builder
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		b.WriteString(key + "\n")
		switch c.Type(ctx, key).Val() {
		case "string":
			b.WriteString(c.Get(ctx, key).Val())
		case "hash":
			fmt.Fprint(&b, c.HGetAll(ctx, key).Val())
		case "stream":
			fmt.Fprint(&b, c.XRange(ctx, key, "-", "+").Val())
		case "zset":
			fmt.Fprint(&b, c.ZRangeWithScores(ctx, key, 0, -1).Val())
		case "list":
			fmt.Fprint(&b, c.LRange(ctx, key, 0, -1).Val())
		case "set":
			fmt.Fprint(&b, c.SMembers(ctx, key).Val())
		}
		b.WriteString("\n")
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// assertSecretNowhere fails the test when the secret, or its last 12
// characters, shows in the errors, the reconciler's status, its logs, its
// store, or what the application received (app may be nil).
func assertSecretNowhere(t *testing.T, secret string, r *Reconciler, s Store, logs *logCapture, app *stripeApp, errs ...error) {
	t.Helper()
	status, err := r.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(status)
	places := map[string]string{"status": string(js), "store": storeText(t, s)}
	if logs != nil {
		places["logs"] = logs.text()
		if len(logs.obs.All()) == 0 {
			t.Error("no log entry was written: the search would prove nothing")
		}
	}
	if app != nil {
		places["application"] = app.received()
		if places["application"] == "" {
			t.Error("the application received nothing: the search would prove nothing")
		}
	}
	for i, e := range errs {
		if e != nil {
			places[fmt.Sprintf("error %d", i)] = e.Error()
		}
	}
	tail := secret[len(secret)-12:]
	for where, text := range places {
		if strings.Contains(text, secret) || strings.Contains(text, tail) {
			t.Errorf("the key or token shows in the %s:\n%s", where, text)
		}
	}
	if !strings.Contains(places["status"], r.cfg.Source) {
		t.Errorf("the status names no source: %s", places["status"])
	}
}
