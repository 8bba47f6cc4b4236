package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/memstore"
)

func TestE2EInFlightConflict(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	url := testkit.StartProxy(t, "webhook_idempotency source conflict", up) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	up.WaitCalls(t, 1, 10*time.Second)

	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	if r2.StatusCode != http.StatusConflict {
		t.Fatalf("duplicate in flight: %d %s, want 409", r2.StatusCode, b2)
	}
	secs, err := strconv.Atoi(r2.Header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 30 {
		t.Fatalf("Retry-After = %q, want whole seconds in [1, 30] (the lease left)", r2.Header.Get("Retry-After"))
	}
	if ct := r2.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("409 Content-Type %q", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b2, &e); err != nil || e.Error == "" {
		t.Fatalf("409 body %q is not a JSON error (%v)", b2, err)
	}

	g.open()
	r1 := testkit.Receive(t, first)
	if r1.Status != 200 || string(r1.Body) != "done 1" {
		t.Fatalf("first: %d %q", r1.Status, r1.Body)
	}
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_busy")
	testkit.WantReplay(t, r3, b3, 200, "done 1")
	up.WantCalls(t, 1)
}

func waitSite(port int, wait string, up *testkit.Upstream) string {
	return fmt.Sprintf(`:%d {
	route {
		e2e_probe wait
		webhook_idempotency source wait {
			in_flight wait %s
		}
		reverse_proxy %s
	}
}`, port, wait, up.Addr())
}

func TestE2EInFlightWaitReplays(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			g.wait(r)
		}
		w.Header().Set("X-Upstream-Call", fmt.Sprint(call))
		fmt.Fprintf(w, "done %d", call)
	})
	arrivals := testkit.NewProbe(t, "wait")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", waitSite(port, "10s", up))
	url := testkit.SiteURL(port) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_wait", "X-Probe", "first")
	up.WaitCalls(t, 1, 10*time.Second)
	second := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_wait", "X-Probe", "second")
	testkit.Arrived(t, arrivals, "second")
	g.open()

	r1, r2 := testkit.Receive(t, first), testkit.Receive(t, second)
	if r1.Status != 200 || string(r1.Body) != "done 1" || r1.Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("first: %d %q %v", r1.Status, r1.Body, r1.Header)
	}
	if r2.Status != 200 || string(r2.Body) != "done 1" || r2.Header.Get(testkit.ReplayedHeader) != "true" || r2.Header.Get("X-Upstream-Call") != "1" {
		t.Fatalf("waiting duplicate: %d %q %v, want the replay of the first", r2.Status, r2.Body, r2.Header)
	}
	up.WantCalls(t, 1)
}

func TestE2EInFlightWaitProcessesAfterRelease(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			g.wait(r)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "done %d", call)
	})
	arrivals := testkit.NewProbe(t, "wait")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", waitSite(port, "10s", up))
	url := testkit.SiteURL(port) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_rel", "X-Probe", "first")
	up.WaitCalls(t, 1, 10*time.Second)
	second := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_rel", "X-Probe", "second")
	testkit.Arrived(t, arrivals, "second")
	g.open()

	if r1 := testkit.Receive(t, first); r1.Status != 503 {
		t.Fatalf("first: %d", r1.Status)
	}
	// the first released the key: the waiter claims it and is processed
	r2 := testkit.Receive(t, second)
	if r2.Status != 200 || string(r2.Body) != "done 2" || r2.Header.Get(testkit.ReplayedHeader) != "" {
		t.Fatalf("waiting duplicate: %d %q %v, want processed", r2.Status, r2.Body, r2.Header)
	}
	up.WantCalls(t, 2)
}

func TestE2EInFlightWaitTimesOut(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		g.wait(r)
		io.WriteString(w, "late")
	})
	testkit.NewProbe(t, "wait")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", waitSite(port, "300ms", up))
	url := testkit.SiteURL(port) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	up.WaitCalls(t, 1, 10*time.Second)
	start := time.Now()
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	waited := time.Since(start)
	if r2.StatusCode != http.StatusConflict || r2.Header.Get("Retry-After") == "" {
		t.Fatalf("after the wait timeout: %d %s %v, want 409 with Retry-After", r2.StatusCode, b2, r2.Header)
	}
	if waited < 300*time.Millisecond {
		t.Fatalf("answered 409 after %v, before the 300ms wait timeout", waited)
	}
	g.open()
	testkit.Receive(t, first)
	up.WantCalls(t, 1)
}

func TestE2EInFlightProceed(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, true)
	url := testkit.StartProxy(t, "webhook_idempotency source proceed in_flight proceed", up) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	up.WaitCalls(t, 1, 10*time.Second)
	r2, b2 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	testkit.WantNew(t, r2, b2, 200)
	if string(b2) != "done 2" {
		t.Fatalf("proceeding duplicate got %q", b2)
	}
	g.open()
	if r1 := testkit.Receive(t, first); string(r1.Body) != "done 1" {
		t.Fatalf("first: %q", r1.Body)
	}
	// the claim holder recorded its answer
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_p")
	testkit.WantReplay(t, r3, b3, 200, "done 1")
	up.WantCalls(t, 2)
}

func TestE2EConcurrentDuplicatesCallUpstreamOnce(t *testing.T) {
	const n = 50
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	url := testkit.StartProxy(t, "webhook_idempotency source herd", up) + "/hook"

	results := make(chan testkit.Reply, n)
	start := make(chan struct{})
	for range n {
		go func() {
			<-start
			results <- testkit.Send(http.MethodPost, url, strings.NewReader(`{"id":"evt_herd"}`), "Idempotency-Key", "evt_herd")
		}()
	}
	close(start)
	// while the one upstream call is held, every other duplicate is
	// answered without reaching the upstream
	var processed, replayed, conflicts int
	count := func(r testkit.Reply) {
		switch {
		case r.Err != nil:
			t.Errorf("request failed: %v", r.Err)
		case r.Status == http.StatusConflict:
			conflicts++
		case r.Status == 200 && r.Header.Get(testkit.ReplayedHeader) == "true" && string(r.Body) == "done 1":
			replayed++
		case r.Status == 200 && r.Header.Get(testkit.ReplayedHeader) == "" && string(r.Body) == "done 1":
			processed++
		default:
			t.Errorf("unexpected answer %d %q %v", r.Status, r.Body, r.Header)
		}
	}
	timeout := time.After(30 * time.Second)
	for range n - 1 {
		select {
		case r := <-results:
			count(r)
		case <-timeout:
			g.open()
			t.Fatalf("only %d answers while the first was held; upstream called %d times", processed+replayed+conflicts, up.Calls.Load())
		}
	}
	g.open()
	count(testkit.Receive(t, results))
	if processed != 1 || conflicts+replayed != n-1 {
		t.Fatalf("processed %d, replayed %d, conflicts %d; want 1 processed and %d duplicates", processed, replayed, conflicts, n-1)
	}
	t.Logf("processed %d, replayed %d, conflicts %d", processed, replayed, conflicts)
	up.WantCalls(t, 1)
	r, b := testkit.Post(t, url, []byte(`{"id":"evt_herd"}`), "Idempotency-Key", "evt_herd")
	testkit.WantReplay(t, r, b, 200, "done 1")
}

func TestE2EConcurrentDuplicatesWaitAndReplay(t *testing.T) {
	const n = 50
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, false)
	arrivals := testkit.NewProbe(t, "wait")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", waitSite(port, "20s", up))
	url := testkit.SiteURL(port) + "/hook"

	results := make(chan testkit.Reply, n)
	for range n {
		go func() {
			results <- testkit.Send(http.MethodPost, url, strings.NewReader(`{}`), "Idempotency-Key", "evt_herd_wait")
		}()
	}
	for range n {
		testkit.Arrived(t, arrivals, "")
	}
	up.WaitCalls(t, 1, 10*time.Second)
	g.open()
	var processed, replayed int
	for range n {
		r := testkit.Receive(t, results)
		switch {
		case r.Status == 200 && string(r.Body) == "done 1" && r.Header.Get(testkit.ReplayedHeader) == "true":
			replayed++
		case r.Status == 200 && string(r.Body) == "done 1" && r.Header.Get(testkit.ReplayedHeader) == "":
			processed++
		default:
			t.Errorf("unexpected answer %d %q %v", r.Status, r.Body, r.Header)
		}
	}
	if processed != 1 || replayed != n-1 {
		t.Fatalf("processed %d, replayed %d; want 1 and %d", processed, replayed, n-1)
	}
	up.WantCalls(t, 1)
}

func TestE2ELeaseExpiryLetsADuplicateThrough(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency source lease lease 1s store memory", up) + "/hook"

	// A request that died after claiming its key: the claim sits in the
	// store, and nothing renews, completes or releases it. That is what a
	// crashed Caddy leaves behind, so the test makes exactly that claim
	// through a memory store of its own, which shares the process-wide
	// table with the running configuration's.
	ctx, cancel := testkit.NewContext(t)
	defer cancel()
	var dead memstore.Store
	if err := dead.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	defer dead.Cleanup()
	// Its lease is 5s rather than 1s only so that a loaded machine still
	// sends the first duplicate below while the lease runs.
	const lease = 5 * time.Second
	claimed := time.Now()
	if res, err := dead.Claim(ctx, "idem:lease:evt_dead", "a-request-that-died", lease); err != nil || res.State != store.StateClaimed {
		t.Fatalf("claim: %v %v", res.State, err)
	}

	r1, b1 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
	if ra, err := strconv.Atoi(r1.Header.Get("Retry-After")); r1.StatusCode != http.StatusConflict || err != nil || ra < 1 || ra > int(lease/time.Second) {
		t.Fatalf("while the dead claim's lease runs: %d %v %s, want 409 with Retry-After the lease left", r1.StatusCode, r1.Header, b1)
	}
	up.WantCalls(t, 0)

	// the provider retries until the lease has run out
	deadline := time.Now().Add(time.Minute)
	var resp *http.Response
	var body []byte
	for {
		resp, body = testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
		if resp.StatusCode != http.StatusConflict {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead claim never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if since := time.Since(claimed); since < lease {
		t.Fatalf("processed %v after the claim, before its %v lease ran out", since, lease)
	}
	testkit.WantNew(t, resp, body, 200)
	r3, b3 := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_dead")
	testkit.WantReplay(t, r3, b3, 200, string(body))
	up.WantCalls(t, 1)
}

func TestE2ELeaseIsRenewedWhileTheUpstreamWorks(t *testing.T) {
	g := newGate()
	defer g.open()
	up := gatedUpstream(t, g, true)
	// renewed every lease/3: 3s leaves a loaded machine (-race, shared
	// cores) two seconds of slack for each renewal
	const lease = 3 * time.Second
	url := testkit.StartProxy(t, "webhook_idempotency source renew lease 3s", up) + "/hook"

	first := testkit.SendAsync(http.MethodPost, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	up.WaitCalls(t, 1, 10*time.Second)
	// the upstream works for more than two leases: every duplicate in
	// that time must still find the key in flight
	start := time.Now()
	for n := 0; time.Since(start) < 2*lease+time.Second; n++ {
		r, b := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
		if r.StatusCode != http.StatusConflict {
			t.Fatalf("duplicate %d, %v into a slow delivery: %d %s, want 409 (the lease was not renewed)", n, time.Since(start), r.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.open()
	if r1 := testkit.Receive(t, first); r1.Status != 200 || string(r1.Body) != "done 1" {
		t.Fatalf("first: %d %q", r1.Status, r1.Body)
	}
	r, b := testkit.Post(t, url, []byte(`{}`), "Idempotency-Key", "evt_slow")
	testkit.WantReplay(t, r, b, 200, "done 1")
	up.WantCalls(t, 1)
}
