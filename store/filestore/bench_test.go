package filestore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// What a completion costs the file store, at the store's interface (no
// HTTP): a claim of a new key, then its completion with a record the size
// of a small JSON answer's, from several goroutines at once as a loaded
// Caddy's requests do. Besides ns/op each run reports
//
//	log/1k       records written to the log per 1,000 completions, one
//	             fdatasync each (log.go)
//	tree/1k      commits of the tree per 1,000 completions; with `sync
//	             always` each is two fdatasyncs (bbolt syncs the pages, then
//	             the meta page), with an interval none
//	fdatasync/1k with `sync always`, log/1k + 2 × tree/1k: what a Caddy's
//	             fdatasyncs count (bench/load.sh counts them with perf or
//	             strace), short of the rare fsync that grows the file
//	pages/commit pages written per commit of the tree, the meta page included
//	cpu-us/op    the process's CPU time (user + system) per completion
//	p50-us, p99-us  the latency of Complete, which with `sync always` is
//	             the wait for the commit that puts the record on disk
//
//	go test -run '^$' -bench 'FileComplete' -benchtime 20000x ./store/filestore

// benchRecord is a record the size of a 17-byte JSON answer's with its
// Content-Type and the body's hash, as the handler encodes it.
var benchRecord = append([]byte{1}, make([]byte, 120)...)

func BenchmarkFileComplete(b *testing.B) {
	for _, syncMode := range []string{"always", "1s"} {
		for _, conc := range []int{1, 8, 32, 128} {
			if syncMode != "always" && conc != 32 {
				continue
			}
			b.Run(fmt.Sprintf("sync=%s/conc=%d", syncMode, conc), func(b *testing.B) {
				benchComplete(b, syncMode, conc)
			})
		}
	}
}

func benchComplete(b *testing.B, syncMode string, conc int) {
	d, err := openDB(filepath.Join(b.TempDir(), "store.db"), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Destruct()
	every, _ := parseSync(syncMode)
	d.syncEvery.Store(int64(every))
	prefix := "idem:bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	m := startMeter(d)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range conc {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t, err := claimComplete(d, prefix+strconv.FormatInt(i, 10))
				if err != nil {
					b.Error(err)
					return
				}
				lat[g] = append(lat[g], t)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	m.report(b, every == 0, slices.Concat(lat...))
}

// claimComplete claims key and completes it with benchRecord, and returns
// how long the completion took.
func claimComplete(d *db, key string) (time.Duration, error) {
	owner := store.NewOwner()
	if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
		return 0, fmt.Errorf("claim %s: %v %v", key, res.State, err)
	}
	t := time.Now()
	if err := d.complete(context.Background(), key, "", owner, benchRecord, time.Hour, nil); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// meter is what the disk was asked for from its start: see the metrics
// above.
type meter struct {
	d                *db
	log, tree, pages uint64
	cpu              time.Duration
}

func startMeter(d *db) meter {
	return meter{d: d, log: d.logWrites.Load(), tree: d.treeCommits.Load(), pages: uint64(pagesWritten(d)), cpu: cpuTime()}
}

// report reports what the disk was asked for per completion since m
// started, and the completions' latencies lat.
func (m meter) report(b *testing.B, always bool, lat []time.Duration) {
	cpu := cpuTime() - m.cpu
	logs, trees, pages := m.d.logWrites.Load()-m.log, m.d.treeCommits.Load()-m.tree, uint64(pagesWritten(m.d))-m.pages
	slices.Sort(lat)
	if len(lat) == 0 || trees == 0 {
		return
	}
	per1k := func(n uint64) float64 { return float64(n) * 1000 / float64(b.N) }
	b.ReportMetric(per1k(logs), "log/1k")
	b.ReportMetric(per1k(trees), "tree/1k")
	if always {
		b.ReportMetric(per1k(logs+2*trees), "fdatasync/1k")
	}
	b.ReportMetric(float64(pages)/float64(trees), "pages/commit")
	b.ReportMetric(per1k(pages), "pages/1k")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// BenchmarkFileCompleteRate: completions arriving at a steady rate, as a
// provider's deliveries do, rather than as fast as the store takes them,
// with random keys (as delivery ids are) in a file that holds 100,000 keys
// already, with `sync always`. At a rate a Caddy sustains, the tree's
// commits are what the rate decides, not the store's speed: how many keys
// share a commit, and how many pages each writes (the metrics are
// BenchmarkFileComplete's; pages/1k is the pages written per 1,000
// completions).
//
//	go test -run '^$' -bench 'FileCompleteRate' -benchtime 20000x ./store/filestore
func BenchmarkFileCompleteRate(b *testing.B) {
	for _, rate := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			benchCompleteAt(b, rate, 100_000)
		})
	}
}

func benchCompleteAt(b *testing.B, rate, prefill int) {
	d, err := openDB(filepath.Join(b.TempDir(), "store.db"), zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Destruct()
	randomKey := func() string {
		var id [16]byte
		_, _ = crand.Read(id[:])
		return "idem:bench:" + hex.EncodeToString(id[:])
	}
	expires := time.Now().Add(time.Hour).UnixNano()
	if err := d.bolt.Update(func(tx *bolt.Tx) error {
		for range prefill {
			if err := putValue(tx, randomKey(), kindRecord, string(benchRecord), expires, false); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if err := d.filter.build(d, nil); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = randomKey()
	}
	lat := make([]time.Duration, b.N)
	m := startMeter(d)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range b.N {
		// on schedule: a late start is not made up by a longer pause
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait)
		}
		wg.Go(func() {
			t, err := claimComplete(d, keys[i])
			if err != nil {
				b.Error(err)
			}
			lat[i] = t
		})
	}
	wg.Wait()
	b.StopTimer()
	m.report(b, true, lat)
}

// pagesWritten is how many pages the file's commits have written so far.
func pagesWritten(d *db) int64 {
	st := d.bolt.Stats()
	return st.TxStats.GetWrite()
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFileSize stores 1,000,000 keys at a steady rate on the store's
// clock (5,000 a second: one key every 200 µs) with a TTL of 30 s, sweeping
// every 10 s of that clock as the sweeper does, and reports the file's size
// when a quarter, half, three quarters and all of the keys are stored
// (MiB-25%, …): with expiry the size levels off once the first keys expire,
// the pages of what is swept being used again. "ttl=1h" stores the same keys
// with nothing expiring: bytes per key of a file that only grows. Keys go in
// from 64 goroutines, the file synced once a second (the file's size does
// not depend on when it is synced). Each run also reports the space free
// inside the file and the size of bbolt's list of it, and how long opening
// the file again takes (open-s).
//
//	go test -run '^$' -bench 'FileSize' -benchtime 1x ./store/filestore
func BenchmarkFileSize(b *testing.B) {
	for _, ttl := range []time.Duration{30 * time.Second, time.Hour} {
		b.Run("ttl="+ttl.String(), func(b *testing.B) {
			for range b.N {
				benchFileSize(b, 1_000_000, ttl)
			}
		})
	}
}

func benchFileSize(b *testing.B, n int, ttl time.Duration) {
	const step = 200 * time.Microsecond // 5,000 keys a second
	path := filepath.Join(b.TempDir(), "store.db")
	d, err := openDB(path, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	d.syncEvery.Store(int64(time.Second))
	start := time.Now()
	var clock atomic.Int64 // keys stored: the clock is start + clock × step
	defer func(saved func() time.Time) { now = saved }(now)
	now = func() time.Time { return start.Add(time.Duration(clock.Load()) * step) }
	size := func() float64 {
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		return float64(fi.Size()) / (1 << 20)
	}
	const workers = 64
	sweepEveryKeys := int64(10 * time.Second / step)
	var next atomic.Int64
	var mu sync.Mutex // the clock, the sweeps and the marks move in key order
	var wg sync.WaitGroup
	marks := map[int64]string{int64(n) / 4: "MiB-25%", int64(n) / 2: "MiB-50%", int64(n) * 3 / 4: "MiB-75%"}
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next.Add(1)
				if i > int64(n) {
					mu.Unlock()
					return
				}
				if i%sweepEveryKeys == 0 {
					if _, err := d.sweep(context.Background()); err != nil {
						b.Error(err)
					}
				}
				if name, ok := marks[i]; ok {
					b.ReportMetric(size(), name)
				}
				clock.Store(i)
				mu.Unlock()
				key := "idem:bench-ff:ffill-" + strconv.FormatInt(i, 10)
				owner := store.NewOwner()
				if res, _, err := d.claim(key, "", owner, time.Minute, 0, claimPlain, nil); err != nil || res.State != store.StateClaimed {
					b.Errorf("claim %s: %v %v", key, res.State, err)
					return
				}
				if err := d.complete(context.Background(), key, "", owner, benchRecord, ttl, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(size(), "MiB-100%")
	b.ReportMetric(size()*(1<<20)/float64(n), "B/key")
	st := d.bolt.Stats()
	b.ReportMetric(float64((st.FreePageN+st.PendingPageN)*d.bolt.Info().PageSize)/(1<<20), "free-MiB")
	b.ReportMetric(float64(st.FreelistInuse)/(1<<10), "freelist-KiB")
	if err := d.Destruct(); err != nil {
		b.Fatal(err)
	}
	// opening the file again: every page read once (check.go)
	t := time.Now()
	if d, err = openDB(path, zap.NewNop()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(t).Seconds(), "open-s")
	if err := d.Destruct(); err != nil {
		b.Fatal(err)
	}
}
