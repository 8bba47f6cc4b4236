package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/ipset"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/metrics"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// TestMain gives the tests a data directory of their own, where the lists
// keep their copies.
func TestMain(m *testing.M) { testkit.Main(m) }

// listServer stands in for the endpoints providers publish their address
// lists at: each path answers what the test last set for it.
type listServer struct {
	*httptest.Server
	mu      sync.Mutex
	answers map[string]listAnswer
	gets    atomic.Int64
}

type listAnswer struct {
	status int
	body   string
}

func newListServer(t *testing.T) *listServer {
	t.Helper()
	s := &listServer{answers: map[string]listAnswer{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.gets.Add(1)
		s.mu.Lock()
		a, ok := s.answers[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	t.Cleanup(s.Close)
	return s
}

// set makes path answer status and body.
func (s *listServer) set(path string, status int, body string) {
	s.mu.Lock()
	s.answers[path] = listAnswer{status, body}
	s.mu.Unlock()
}

// useListServer points every provider's list at the server, at
// /<provider>, for the test.
func useListServer(t *testing.T, s *listServer) {
	t.Helper()
	old := listURL
	listURL = func(provider string, _ providers.AddressList) string { return s.URL + "/" + provider }
	t.Cleanup(func() { listURL = old })
}

// fastLists shortens the lists' timing for the test.
func fastLists(t *testing.T) {
	t.Helper()
	oldMin, oldRetry := minRefresh, retryDelay
	minRefresh, retryDelay = time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { minRefresh, retryDelay = oldMin, oldRetry })
}

// newLists builds lists for the test, released at its end.
func newLists(t *testing.T, src Sources) *Lists {
	t.Helper()
	a, err := NewLists(src, zap.NewNop())
	if err != nil {
		t.Fatalf("NewLists: %v", err)
	}
	t.Cleanup(a.Release)
	return a
}

// wantCheck checks the lists' verdict on addr.
func wantCheck(t *testing.T, a *Lists, addr string, want Verdict) {
	t.Helper()
	if got := a.Check(netip.MustParseAddr(addr)); got != want {
		t.Fatalf("%s: verdict %d, want %d", addr, got, want)
	}
}

// TestAllowIPsClientAddressIsCaddys: the address Caddy determined (with
// trusted_proxies) decides, not the connection's peer.
func TestAllowIPsClientAddressIsCaddys(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	r.RemoteAddr = "10.0.0.1:4444"
	r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), httptest.NewRecorder(), nil)
	if got := ClientAddr(r); got != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("without client_ip: %v, want the peer", got)
	}
	caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, "203.0.113.5")
	if got := ClientAddr(r); got != netip.MustParseAddr("203.0.113.5") {
		t.Fatalf("with client_ip: %v", got)
	}
	caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, "fe80::1%eth0")
	if got := ClientAddr(r); got != netip.MustParseAddr("fe80::1") {
		t.Fatalf("with a zone: %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { ClientAddr(r) }); n != 0 {
		t.Fatalf("clientAddr allocates %.0f times", n)
	}
}

// The shapes the providers publish their lists in, as served by them: the
// other ranges and fields must not leak into the allow list.
const (
	githubMeta = `{"verifiable_password_authentication":false,"ssh_key_fingerprints":{"SHA256_ED25519":"+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"},
		"hooks":["192.30.252.0/22","185.199.108.0/22","140.82.112.0/20","143.55.64.0/20","2a0a:a440::/29","2606:50c0::/32"],
		"web":["20.201.28.151/32"],"api":["20.205.243.168/32"],"actions":["4.148.0.0/16","13.64.0.0/16"],"domains":{"website":["*.github.com"]}}`
	stripeIPs = `{"WEBHOOKS":["3.18.12.63","3.130.192.231","13.235.14.237","54.187.174.169"]}`
	svixIPs   = `{"us":["44.228.126.217","50.112.21.217","2600:1f24:64:8000::/56"],"eu":["52.215.16.239"],"ca":["52.60.44.49"]}`
	linearIPs = `{"ips":["35.231.147.226","35.243.134.228"],"codingSessionIps":["34.1.2.3"]}`
)

func TestAllowIPsProvidersLists(t *testing.T) {
	srv := newListServer(t)
	useListServer(t, srv)
	srv.set("/github", 200, githubMeta)
	srv.set("/stripe", 200, stripeIPs)
	srv.set("/svix", 200, svixIPs)
	srv.set("/linear", 200, linearIPs)
	for _, tc := range []struct {
		provider     string
		allowed, not []string
	}{
		{"github", []string{"140.82.115.7", "192.30.252.1", "2a0a:a440::1"}, []string{"20.201.28.151", "4.148.1.1", "13.64.0.1"}},
		{"stripe", []string{"3.18.12.63", "54.187.174.169"}, []string{"3.18.12.64"}},
		{"svix", []string{"44.228.126.217", "52.215.16.239", "52.60.44.49", "2600:1f24:64:8000::7"}, []string{"44.228.126.218"}},
		{"linear", []string{"35.231.147.226", "35.243.134.228"}, []string{"34.1.2.3"}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			lists := newLists(t, Sources{Providers: []string{tc.provider}})
			for _, a := range tc.allowed {
				wantCheck(t, lists, a, Allowed)
			}
			for _, a := range tc.not {
				wantCheck(t, lists, a, Refused)
			}
			st := lists.Statuses()
			if len(st) != 1 || st[0].Source != tc.provider || st[0].Kind != "provider" || st[0].LoadedFrom != "fetch" || st[0].LastError != "" || st[0].LastRefresh == nil || st[0].Refresh != "1h0m0s" {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestAllowListRefreshedAndMalformedRefused: a list is refreshed in the
// background; one that does not parse, an error answer or a list wider
// than any provider's is refused, and the last good one kept.
func TestAllowListRefreshedAndMalformedRefused(t *testing.T) {
	fastLists(t)
	srv := newListServer(t)
	srv.set("/list", 200, "192.0.2.1\n")
	a := newLists(t, Sources{URLs: []string{srv.URL + "/list"}, Refresh: 30 * time.Millisecond})
	wantCheck(t, a, "192.0.2.1", Allowed)
	wantCheck(t, a, "192.0.2.2", Refused)

	srv.set("/list", 200, `["192.0.2.2"]`)
	testkit.Eventually(t, 30*time.Second, "the refreshed list in use", func() bool {
		return a.Check(netip.MustParseAddr("192.0.2.2")) == Allowed
	})
	wantCheck(t, a, "192.0.2.1", Refused)

	for _, bad := range []listAnswer{
		{200, "<html>maintenance</html>"},
		{200, `{"WEBHOOKS":[]}`},
		{200, "192.0.2.3\nnot-an-address\n"},
		{200, "0.0.0.0/0\n"},
		{503, "192.0.2.4\n"},
	} {
		before := a.Statuses()[0]
		srv.set("/list", bad.status, bad.body)
		testkit.WaitFor(t, 30*time.Second, "a failed refresh of "+bad.body, func() (bool, string) {
			st := a.Statuses()[0]
			return st.LastError != "" && st.LastAttempt.After(*before.LastAttempt), st.LastError
		})
		wantCheck(t, a, "192.0.2.2", Allowed)
		wantCheck(t, a, "192.0.2.3", Refused)
		wantCheck(t, a, "192.0.2.4", Refused)
		// a further failed attempt keeps the list loaded before
		failed := a.Statuses()[0]
		testkit.WaitFor(t, 30*time.Second, "another failed refresh", func() (bool, string) {
			st := a.Statuses()[0]
			return st.LastAttempt.After(*failed.LastAttempt), st.LastError
		})
		if st := a.Statuses()[0]; st.Ranges != 1 || st.LastError == "" || !st.LastRefresh.Equal(*failed.LastRefresh) {
			t.Fatalf("after %q: status %+v, want the list loaded at %s kept", bad.body, st, failed.LastRefresh)
		}
	}
	srv.set("/list", 200, "192.0.2.5\n")
	testkit.WaitFor(t, 30*time.Second, "recovery", func() (bool, string) {
		st := a.Statuses()[0]
		return st.LastError == "" && a.Check(netip.MustParseAddr("192.0.2.5")) == Allowed, st.LastError
	})
}

// TestAllowListKeptOnDisk: a fetched list is kept in Caddy's data
// directory; a list loaded again (a restart) while its URL is unreachable
// uses that copy.
func TestAllowListKeptOnDisk(t *testing.T) {
	srv := newListServer(t)
	useListServer(t, srv)
	srv.set("/github", 200, githubMeta)
	logger := zap.NewNop()
	src := source{name: "github", kind: "provider", url: srv.URL + "/github", field: "hooks"}
	l, ref, err := loadList(logger, src, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if l.status().LoadedFrom != "fetch" {
		t.Fatalf("status %+v", l.status())
	}
	data, err := os.ReadFile(l.cache)
	if err != nil {
		t.Fatalf("no copy on disk: %v", err)
	}
	if !strings.HasPrefix(l.cache, filepath.Join(caddy.AppDataDir(), "webhook_idempotency")) {
		t.Fatalf("copy at %s, outside Caddy's data directory", l.cache)
	}
	var c listCopy
	if err := json.Unmarshal(data, &c); err != nil || c.Source != "github" || len(c.Ranges) != 6 {
		t.Fatalf("copy %s: %v", data, err)
	}
	fetchedAt := *l.status().LastRefresh
	_ = ref.Release() // the last user: the list is stopped, as at a restart

	srv.Close() // the provider is unreachable now
	l2, ref2, err := loadList(logger, src, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer ref2.Release()
	if l2 == l {
		t.Fatal("the released list was not destroyed")
	}
	st := l2.status()
	if st.LoadedFrom != "disk" || st.Ranges != 6 || st.LastError == "" || !st.LastRefresh.Equal(fetchedAt) {
		t.Fatalf("status %+v", st)
	}
	if !l2.set.Load().Contains(netip.MustParseAddr("140.82.115.7")) {
		t.Fatal("the copy on disk does not allow GitHub's range")
	}

	// a damaged copy is ignored, never trusted in part
	if err := os.WriteFile(l.cache, []byte(`{"id":"`+src.id()+`","ranges":["140.82.112.0/20","x"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	l3 := &list{src: src, cache: l.cache, logger: logger, ranges: l.ranges}
	l3.loadCopy()
	if l3.set.Load() != nil {
		t.Fatal("a damaged copy was used")
	}
}

// TestAllowListCopyCheckedAsAFetch: the copy kept on disk passes the checks
// a fetched list passes. Before, a copy edited to 0.0.0.0/0 allowed every
// address, and a 41 MB copy was loaded (365 MB of memory) where a fetch
// over 8 MiB is refused.
func TestAllowListCopyCheckedAsAFetch(t *testing.T) {
	testkit.OwnDataDir(t)
	src := source{name: "github", kind: "provider", url: "http://127.0.0.1:1/github", field: "hooks"}
	path := copyPath(src)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	copyOf := func(ranges []string) []byte {
		b, err := json.Marshal(listCopy{Source: "github", ID: src.id(), FetchedAt: time.Now(), Ranges: ranges})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	many := func(n int, format string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i>>16&0xff, i>>8&0xff, i&0xff)
		}
		return out
	}
	// over 8 MiB: valid ranges padded with spaces, as an edit could leave them
	padded := many(1000, "10.%d.%d.%d/32")
	for i := range padded {
		padded[i] = strings.Repeat(" ", 9000) + padded[i]
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"every IPv4 address", copyOf([]string{"140.82.112.0/20", "0.0.0.0/0"})},
		{"every IPv6 address", copyOf([]string{"::/0"})},
		{"wider than a /8", copyOf([]string{"128.0.0.0/1"})},
		{"empty", copyOf([]string{})},
		{"no ranges field", []byte(`{"id":"` + src.id() + `"}`)},
		{"more than MaxRanges", copyOf(many(ipset.MaxRanges+1, "10.%d.%d.%d/32"))},
		{"over 8 MiB", copyOf(padded)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, c.data, 0o600); err != nil {
				t.Fatal(err)
			}
			l := &list{src: src, cache: path, logger: zap.NewNop(), ranges: metrics.AllowListRanges.WithLabelValues("copy_test")}
			l.loadCopy()
			if set := l.set.Load(); set != nil {
				t.Fatalf("a copy of %d bytes (%s) was put in use: %d ranges", len(c.data), c.name, set.Len())
			}
		})
	}
	// a good copy is used
	if err := os.WriteFile(path, copyOf([]string{"140.82.112.0/20", "2a0a:a440::/29"}), 0o600); err != nil {
		t.Fatal(err)
	}
	l := &list{src: src, cache: path, logger: zap.NewNop(), ranges: metrics.AllowListRanges.WithLabelValues("copy_test")}
	l.loadCopy()
	if set := l.set.Load(); set == nil || set.Len() != 2 {
		t.Fatal("a good copy was not used")
	}
}

func TestAllowIPsFileList(t *testing.T) {
	fastLists(t)
	path := filepath.Join(t.TempDir(), "ips.txt")
	if err := os.WriteFile(path, []byte("# ours\n192.0.2.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newLists(t, Sources{Files: []string{path}, Refresh: 20 * time.Millisecond})
	wantCheck(t, a, "192.0.2.1", Allowed)
	if err := os.WriteFile(path, []byte("192.0.2.2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the file read again", func() bool {
		return a.Check(netip.MustParseAddr("192.0.2.2")) == Allowed
	})
	if st := a.Statuses()[0]; st.LoadedFrom != "file" || st.Source != path {
		t.Fatalf("status %+v", st)
	}

	// a file that does not parse at provision is a configuration error
	bad := filepath.Join(t.TempDir(), "bad.txt")
	_ = os.WriteFile(bad, []byte("192.0.2.1\nhooks\n"), 0o600)
	_, err := NewLists(Sources{Files: []string{bad}}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "allow_ips file "+bad+": line 2") {
		t.Fatalf("NewLists: %v", err)
	}
}

func TestAllowListDisplayURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://ips.example.com/list.txt":               "https://ips.example.com/list.txt",
		"https://user:pass@ips.example.com/list?token=s": "https://user@ips.example.com/list?…",
	} {
		if got := displayURL(in); got != want {
			t.Errorf("displayURL(%s) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkAllowIPs is the check on the request path: the client address
// Caddy set, parsed and looked up in GitHub's hooks and Stripe's list.
func BenchmarkAllowIPs(b *testing.B) {
	ranges := []string{"192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20", "2a0a:a440::/29", "2606:50c0::/32",
		"3.18.12.63", "3.130.192.231", "13.235.14.237", "13.235.122.149", "18.211.135.69", "35.154.171.200", "35.157.207.129",
		"52.15.183.38", "54.88.130.119", "54.88.130.237", "54.187.174.169", "54.187.205.235", "54.187.216.72"}
	a, err := NewLists(Sources{Ranges: ranges}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	for _, addr := range []string{"140.82.115.7", "54.187.216.72", "203.0.113.9"} {
		r := httptest.NewRequest(http.MethodPost, "/hook", nil)
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), httptest.NewRecorder(), nil)
		caddyhttp.SetVar(r.Context(), caddyhttp.ClientIPVarKey, addr)
		want := Allowed
		if addr == "203.0.113.9" {
			want = Refused
		}
		b.Run(addr, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if a.Check(ClientAddr(r)) != want {
					b.Fatal("wrong verdict")
				}
			}
		})
	}
}
