package archive

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
)

// An archive on a file store whose disk is full is degraded, never an
// error that refuses the configuration (and with it every site): built,
// it reads as empty, counts what it cannot keep, and keeps events again
// once there is room. Before, building it failed ("no space left on
// device") and Caddy did not start.
func TestFileArchiveOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	testkit.MountTmpfs(t, dir, "size=8m")
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	s := &filestore.Store{Path: filepath.Join(dir, "store.db")}
	if err := s.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Cleanup()

	// the disk fills up, and the store's file takes the room it had left:
	// completions are answered from its log, which the file cannot take
	// (as at a restart on a full disk, with the log's records to apply)
	filler := testkit.FillDisk(t, dir)
	big := make([]byte, 32<<10)
	complete := func(key string) error {
		owner := store.NewOwner()
		if _, err := s.Claim(t.Context(), key, owner, time.Minute); err != nil {
			return err
		}
		hash := sha256.Sum256(big)
		return s.Complete(t.Context(), key, owner, append(record.Encode(nil, 200, nil, &hash), big...), time.Hour)
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 completions of 32 KiB fit a full disk and its log")
		}
		if err := complete(fmt.Sprint("fill:", i)); err != nil {
			break
		}
	}

	rd, _ := redact.New(nil)
	a, err := New(Config{Source: "full_disk", Retention: time.Hour, Bodies: true, Redact: rd, Logger: zap.NewNop()}, s)
	if err != nil {
		t.Fatalf("an archive on a full disk refused: %v", err)
	}
	defer a.Stop()
	var m dto.Metric
	if err := a.metrics.errors.Write(&m); err != nil || m.Counter.GetValue() != 1 {
		t.Fatalf("archive errors counted: %v (%v), want 1", m.Counter.GetValue(), err)
	}
	if evs, cursor, err := a.Find(t.Context(), Query{Count: 10}); err != nil || len(evs) != 0 || cursor != "" {
		t.Fatalf("an archive that never wrote, listed: %v %q %v", evs, cursor, err)
	}
	if n, err := a.Size(t.Context()); err != nil || n != 0 {
		t.Fatalf("its size: %d %v", n, err)
	}
	if err := a.Export(t.Context(), Query{}, 10, func(*Event) error { return errors.New("an event") }); err != nil {
		t.Fatalf("its export: %v", err)
	}
	if err := a.backend.appendBatch(context.Background(), []*Entry{exportEntry("full_disk", 0, "new")}); err == nil {
		t.Fatal("an append on a full disk succeeded")
	}

	// room again: the next append makes the buckets
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := a.backend.appendBatch(context.Background(), []*Entry{exportEntry("full_disk", 1, "new")}); err != nil {
		t.Fatalf("an append once there is room: %v", err)
	}
	evs, _, err := a.Find(t.Context(), Query{Count: 10})
	if err != nil || keysOf(evs) != "[k1]" {
		t.Fatalf("after room was made: %s %v", keysOf(evs), err)
	}
}
