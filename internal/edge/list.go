package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/ipset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/usage"
)

// maxList bounds a fetched list or file (GitHub's meta document, which
// holds every range GitHub publishes, is a few hundred KB).
const maxList = 8 << 20

// pool holds the lists in use, by source and refresh: routes and
// reloads that name the same list share one, fetched once.
var pool = caddy.NewUsagePool()

// source says where a list comes from.
type source struct {
	name  string // as the admin API shows it: the provider, the URL or the path
	kind  string // provider, url or file
	url   string
	file  string
	field string // the JSON field of a provider's list
}

// id identifies the list's content (not its refresh), for the disk copy.
func (s source) id() string {
	return s.kind + "|" + s.name + "|" + s.url + "|" + s.file + "|" + s.field
}

// list is one list, loaded and refreshed in the background; the
// request path reads set and nothing else.
type list struct {
	src     source
	refresh time.Duration
	logger  *zap.Logger
	client  *http.Client
	cache   string // the disk copy; "" for a file

	set atomic.Pointer[ipset.Set]

	mu    sync.Mutex
	state listState

	ranges    prometheus.Gauge
	refreshed prometheus.Counter
	failures  prometheus.Counter

	cancel context.CancelFunc
	done   chan struct{}
}

// listState is what the admin API tells of a list.
type listState struct {
	loadedFrom  string    // fetch, disk or file
	loadedAt    time.Time // when the list in use was fetched or read
	lastAttempt time.Time
	lastError   string
}

// loadList returns the shared list of a source, loading it the first
// time: a file must load; a URL that cannot be fetched is a warning (the
// disk copy is used meanwhile, and without one the route answers 503 to
// addresses no other list allows).
func loadList(logger *zap.Logger, src source, refresh time.Duration) (*list, usage.Ref, error) {
	key := src.id() + "|" + refresh.String()
	val, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		l := &list{
			src:     src,
			refresh: refresh,
			logger:  logger.With(zap.String("allow_list", src.name)),
			client:  &http.Client{Timeout: fetchTimeout},
			done:    make(chan struct{}),
		}
		l.ranges = metrics.AllowListRanges.WithLabelValues(src.name)
		l.refreshed = metrics.AllowListRefreshes.WithLabelValues(src.name, "ok")
		l.failures = metrics.AllowListRefreshes.WithLabelValues(src.name, "failed")
		if src.kind == "file" {
			if err := l.load(context.Background()); err != nil {
				return nil, fmt.Errorf("allow_ips file %s: %v", src.file, err)
			}
		} else {
			l.cache = copyPath(src)
			l.loadCopy()
			if err := l.load(context.Background()); err != nil {
				if l.set.Load() != nil {
					l.logger.Warn("address list could not be fetched; using the copy kept on disk", zap.Time("fetched_at", l.state.loadedAt), zap.Error(err))
				} else {
					l.logger.Warn("address list could not be fetched and no copy is kept on disk: requests from addresses no other list allows get 503 until it loads", zap.Error(err))
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		go l.run(ctx)
		return l, nil
	})
	if err != nil {
		return nil, usage.Ref{}, err
	}
	return val.(*list), usage.NewRef(pool, key), nil
}

// Destruct stops the background refresh.
func (l *list) Destruct() error {
	l.cancel()
	<-l.done
	metrics.AllowListRanges.DeleteLabelValues(l.src.name)
	return nil
}

// run refreshes the list every refresh interval, sooner after a failure.
func (l *list) run(ctx context.Context) {
	defer close(l.done)
	timer := time.NewTimer(l.next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if err := l.load(ctx); err != nil && ctx.Err() == nil {
			l.logger.Warn("refreshing address list failed; keeping the last good list", zap.Bool("has_list", l.set.Load() != nil), zap.Error(err))
		}
		timer.Reset(l.next())
	}
}

// next is the time to the next refresh: the interval, or the retry delay
// after a failure when that is sooner.
func (l *list) next() time.Duration {
	l.mu.Lock()
	failed := l.state.lastError != ""
	l.mu.Unlock()
	if failed {
		return min(l.refresh, retryDelay)
	}
	return l.refresh
}

// load fetches or reads the list and, when it parses, puts it in use and
// keeps a copy on disk. A list that does not parse is refused whole: the
// last good one stays in use.
func (l *list) load(ctx context.Context) error {
	now := time.Now()
	var data []byte
	var err error
	if l.src.kind == "file" {
		data, err = readListFile(l.src.file)
	} else {
		data, err = l.fetch(ctx)
	}
	var set *ipset.Set
	if err == nil {
		set, err = parseList(data, l.src.field)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state.lastAttempt = now
	if err != nil {
		l.state.lastError = err.Error()
		l.failures.Inc()
		return err
	}
	l.set.Store(set)
	l.ranges.Set(float64(set.Len()))
	l.refreshed.Inc()
	l.state.lastError = ""
	l.state.loadedAt = now
	l.state.loadedFrom = "fetch"
	if l.src.kind == "file" {
		l.state.loadedFrom = "file"
	}
	if l.cache != "" {
		if werr := writeCopy(l.cache, l.src, now, set); werr != nil {
			l.logger.Warn("keeping the address list on disk failed; a restart without network will not have it", zap.String("path", l.cache), zap.Error(werr))
		}
	}
	return nil
}

// parseList parses a fetched list or file, and checks it
// (checkRanges).
func parseList(data []byte, field string) (*ipset.Set, error) {
	prefixes, err := ipset.Parse(data, field)
	if err != nil {
		return nil, err
	}
	if err := checkRanges(prefixes); err != nil {
		return nil, err
	}
	return ipset.New(prefixes), nil
}

// checkRanges refuses a list, fetched, read or kept on disk, that
// holds no range, more than ipset.MaxRanges, or a range wider than a /8
// (IPv4) or a /16 (IPv6), such as 0.0.0.0/0 or ::/0: no provider sends
// from so many addresses, and such a list is broken or not the
// provider's.
func checkRanges(prefixes []netip.Prefix) error {
	if len(prefixes) == 0 {
		return ipset.ErrEmpty
	}
	if len(prefixes) > ipset.MaxRanges {
		return fmt.Errorf("more than %d ranges", ipset.MaxRanges)
	}
	for _, p := range prefixes {
		if (p.Addr().Is4() && p.Bits() < 8) || (!p.Addr().Is4() && p.Bits() < 16) {
			return fmt.Errorf("the list allows %s, wider than any provider sends from", p)
		}
	}
	return nil
}

// fetch gets the list over HTTP.
func (l *list) fetch(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.src.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.1")
	req.Header.Set("User-Agent", "caddy-webhook-idempotency (allow_ips)")
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", l.src.url, resp.StatusCode)
	}
	return readBounded(resp.Body)
}

// readListFile reads a list file.
func readListFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f)
}

func readBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxList+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxList {
		return nil, fmt.Errorf("the list is larger than %d MiB", maxList>>20)
	}
	return data, nil
}

// copyPath is where a fetched list is kept: in Caddy's data
// directory, beside the file store's default file.
func copyPath(src source) string {
	sum := sha256.Sum256([]byte(src.id()))
	return filepath.Join(caddy.AppDataDir(), "webhook_idempotency", "allow_lists", hex.EncodeToString(sum[:12])+".json")
}

// listCopy is a list as it is kept on disk.
type listCopy struct {
	Source    string    `json:"source"`
	ID        string    `json:"id"`
	FetchedAt time.Time `json:"fetched_at"`
	Ranges    []string  `json:"ranges"`
}

// writeCopy keeps a list on disk, replacing the previous copy whole.
func writeCopy(path string, src source, at time.Time, set *ipset.Set) error {
	data, err := json.Marshal(listCopy{Source: src.name, ID: src.id(), FetchedAt: at.UTC(), Ranges: set.Strings()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".allow-list-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loadCopy puts the list kept on disk in use, when there is a good one:
// it passes the checks a fetched list passes (its size, read bounded as a
// fetch is, then checkRanges), for it may have been edited or
// replaced since it was written (a copy of a good list is at most about
// 5 MB: MaxRanges ranges of an IPv6 address each).
func (l *list) loadCopy() {
	data, err := readListFile(l.cache)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var c listCopy
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	var prefixes []netip.Prefix
	if err == nil && c.ID != l.src.id() {
		err = errors.New("the copy is of another list")
	}
	if err == nil && len(c.Ranges) > ipset.MaxRanges {
		err = fmt.Errorf("more than %d ranges", ipset.MaxRanges)
	}
	if err == nil {
		prefixes, err = ipset.ParseAll(c.Ranges)
	}
	if err == nil {
		err = checkRanges(prefixes)
	}
	if err != nil {
		l.logger.Warn("ignoring the address list kept on disk", zap.String("path", l.cache), zap.Error(err))
		return
	}
	set := ipset.New(prefixes)
	l.set.Store(set)
	l.ranges.Set(float64(set.Len()))
	l.state.loadedFrom = "disk"
	l.state.loadedAt = c.FetchedAt
}

// ListStatus is a list as the admin API shows it.
type ListStatus struct {
	// Source is the provider, the URL or the file; `inline` for the
	// ranges written in the configuration.
	Source string `json:"source"`
	// Kind is provider, url, file or inline.
	Kind string `json:"kind"`
	// Ranges is the number of ranges in use.
	Ranges int `json:"ranges"`
	// LoadedFrom says where the list in use came from: fetch, disk (the
	// copy kept on disk, until a fetch succeeds) or file.
	LoadedFrom string `json:"loaded_from,omitempty"`
	// LastRefresh is when the list in use was fetched or read.
	LastRefresh *time.Time `json:"last_refresh,omitempty"`
	// LastAttempt is when the list was last fetched or read, successfully
	// or not.
	LastAttempt *time.Time `json:"last_attempt,omitempty"`
	// LastError is the error of the last attempt, "" when it succeeded.
	LastError string `json:"last_error,omitempty"`
	// Refresh is the refresh interval.
	Refresh string `json:"refresh,omitempty"`
}

// status reads a list's state for the admin API.
func (l *list) status() ListStatus {
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	out := ListStatus{
		Source:     l.src.name,
		Kind:       l.src.kind,
		Ranges:     l.set.Load().Len(),
		LoadedFrom: st.loadedFrom,
		LastError:  st.lastError,
		Refresh:    l.refresh.String(),
	}
	if !st.loadedAt.IsZero() {
		t := st.loadedAt.UTC()
		out.LastRefresh = &t
	}
	if !st.lastAttempt.IsZero() {
		t := st.lastAttempt.UTC()
		out.LastAttempt = &t
	}
	return out
}

// Interface guards
var _ caddy.Destructor = (*list)(nil)
