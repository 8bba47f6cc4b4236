package filestore

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
)

// A store file or log deleted, moved away or replaced under the running
// Caddy is noticed: logged at ERROR, counted, and the store reports itself
// unhealthy until the file is back. Before, nothing noticed: duplicates
// were replayed from memory until a restart, after which every earlier
// delivery ran again.
func TestFileLostIsNoticed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		lose func(t *testing.T, path string)
		want string
	}{
		{"file deleted", func(t *testing.T, path string) { remove(t, path) }, "was deleted"},
		{"log deleted", func(t *testing.T, path string) { remove(t, logPath(path)) }, ".log was deleted"},
		{"file replaced", func(t *testing.T, path string) {
			other := path + ".restored"
			if err := os.WriteFile(other, []byte("another file"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}, "was replaced by another file"},
		{"file moved away", func(t *testing.T, path string) { rename(t, path, path+".away") }, "was moved away"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "store.db")
			core, logs := observer.New(zapcore.InfoLevel)
			d, err := openDB(path, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			closers.Store(d, new(sync.Once))
			t.Cleanup(func() { closeTest(t, d) })
			healthy := func() float64 { return value(t, metrics.StoreFileHealthy.WithLabelValues(path)) }
			lost := func() float64 { return value(t, metrics.StoreFileLost.WithLabelValues(path)) }

			d.checkHealth()
			if err := d.health.err(); err != nil || healthy() != 1 || lost() != 0 {
				t.Fatalf("a store just opened: %v, healthy %v, lost %v", err, healthy(), lost())
			}
			c.lose(t, path)
			d.checkHealth()
			d.checkHealth() // counted and logged once
			err = d.health.err()
			if err == nil || !strings.Contains(err.Error(), c.want) || healthy() != 0 || lost() != 1 {
				t.Fatalf("after the loss: %v, healthy %v, lost %v; want %q", err, healthy(), lost(), c.want)
			}
			errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
			if len(errs) != 1 || errs[0].ContextMap()["path"] != path || !strings.HasPrefix(errs[0].ContextMap()["open_file"].(string), "/proc/") {
				t.Fatalf("ERROR lines: %+v", errs)
			}
			if c.name == "file moved away" {
				// back where it was: healthy again
				rename(t, path+".away", path)
				d.checkHealth()
				if err := d.health.err(); err != nil || healthy() != 1 || lost() != 1 {
					t.Fatalf("the file back: %v, healthy %v, lost %v", err, healthy(), lost())
				}
			}
		})
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// value reads a gauge's or a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}
