package filestore

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
)

// The file under the running Caddy (docs/stores.md, "A file deleted or
// replaced"). bbolt and the log write through the files they opened: a
// file deleted, or replaced by another (moved over, restored from a copy),
// while Caddy runs goes on taking completions that no restart will find,
// and after the restart the deliveries recorded since it was opened are
// processed again. Every healthEvery the store and its log are checked:
// each must still be linked (its link count) and be the file at its path
// (device and inode). One that is not is logged at ERROR, counted
// (caddy_webhook_idempotency_store_file_lost_total), and makes the store
// unhealthy (caddy_webhook_idempotency_store_file_healthy 0, and
// store.HealthReporter) until it is back.

// healthEvery is how often the files are checked.
var healthEvery = 5 * time.Second

// watched is one file the store has open: the store's file or its log.
type watched struct {
	path     string
	f        *os.File // a handle of the store's own, for the link count
	dev, ino uint64
}

// fileHealth is the state of the store's files.
type fileHealth struct {
	files   []watched
	lost    atomic.Pointer[error] // nil: healthy
	healthy prometheus.Gauge
	losses  prometheus.Counter
}

// watch records the identity of the files d opened (the store's file, and
// its log when it has one), and starts the store healthy.
func (d *db) watch() error {
	h := &d.health
	paths := []string{d.path}
	if d.log != nil {
		paths = append(paths, d.log.path)
	}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			h.close()
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			h.close()
			return err
		}
		h.files = append(h.files, watched{path: path, f: f, dev: uint64(st.Dev), ino: uint64(st.Ino)})
	}
	h.healthy = metrics.StoreFileHealthy.WithLabelValues(d.path)
	h.healthy.Set(1)
	h.losses = metrics.StoreFileLost.WithLabelValues(d.path) // at 0 from the start, for increase()
	return nil
}

// check reports what became of the first file that is no longer the one
// opened, or nil.
func (h *fileHealth) check() error {
	for _, w := range h.files {
		var open, at syscall.Stat_t
		if err := syscall.Fstat(int(w.f.Fd()), &open); err != nil {
			continue // cannot tell: no alarm
		}
		gone := "moved"
		if open.Nlink == 0 {
			gone = "deleted"
		}
		err := syscall.Stat(w.path, &at)
		switch {
		case errors.Is(err, syscall.ENOENT) && open.Nlink == 0:
			return fmt.Errorf("file store: %s was deleted while Caddy runs", w.path)
		case errors.Is(err, syscall.ENOENT):
			return fmt.Errorf("file store: %s was moved away while Caddy runs", w.path)
		case err != nil:
			continue // cannot tell (a directory that cannot be read): no alarm
		case uint64(at.Dev) != w.dev || uint64(at.Ino) != w.ino:
			return fmt.Errorf("file store: %s was replaced by another file while Caddy runs (the file Caddy opened was %s)", w.path, gone)
		}
	}
	return nil
}

// err is why the store is unhealthy, or nil.
func (h *fileHealth) err() error {
	if e := h.lost.Load(); e != nil {
		return *e
	}
	return nil
}

// close gives back the handles on the files.
func (h *fileHealth) close() {
	for _, w := range h.files {
		_ = w.f.Close()
	}
	h.files = nil
}

// healthLoop checks the files every healthEvery until the store closes.
func (d *db) healthLoop() {
	defer d.done.Done()
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		d.checkHealth()
	}
}

// checkHealth checks the files once and reports a change.
func (d *db) checkHealth() {
	h := &d.health
	err := h.check()
	was := h.err()
	switch {
	case err != nil && was == nil:
		h.lost.Store(&err)
		h.healthy.Set(0)
		h.losses.Inc()
		fields := []zap.Field{zap.String("path", d.path), zap.Error(err)}
		// the files as they were opened, deleted or not, for a copy
		for i, name := range []string{"open_file", "open_log"}[:len(h.files)] {
			fields = append(fields, zap.String(name, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), h.files[i].f.Fd())))
		}
		d.logger.Error("file store: the store's file is not the one Caddy opened: what is recorded now goes where no restart will find it, and after a restart the deliveries recorded until then may be processed again; copy open_file to path and open_log to path.log (the files Caddy still has open), then restart Caddy (docs/stores.md)",
			fields...)
	case err == nil && was != nil:
		h.lost.Store(nil)
		h.healthy.Set(1)
		d.logger.Info("file store: the store's file is the one Caddy opened again", zap.String("path", d.path))
	}
}

// Health implements store.HealthReporter: why the store's file (or its
// log) is not the one Caddy opened, or nil.
func (s *Store) Health() error { return s.use.file().health.err() }
