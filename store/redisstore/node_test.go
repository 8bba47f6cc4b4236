package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// keysByMaster returns n store keys served by each of the cluster's
// masters, by address.
func keysByMaster(t *testing.T, cluster *testkit.Cluster, n int) map[string][]string {
	t.Helper()
	cc := cluster.Client(t)
	out := make(map[string][]string)
	for i := 0; ; i++ {
		key := fmt.Sprintf("idem:test:node_%d", i)
		m, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		addr := m.Options().Addr
		if len(out[addr]) < n {
			out[addr] = append(out[addr], key)
		}
		full := len(out) == len(cluster.Nodes)
		for _, keys := range out {
			full = full && len(keys) == n
		}
		if full {
			return out
		}
	}
}

// On a Redis Cluster the breaker is per node (docs/stores.md, "When Redis
// fails"): a master that hangs or dies fails only the keys of its slots,
// at once once its breaker is open, while the keys of the other masters
// keep claiming, completing and replaying, none of them waiting for the
// failed master, and the failed master's keys work again once it answers.
func TestRedisClusterBreakerPerNode(t *testing.T) {
	for _, failure := range []string{"paused", "killed"} {
		t.Run(failure, func(t *testing.T) {
			// full coverage off: the healthy masters serve whatever the
			// cluster thinks of the failed one, however long the test takes
			cluster := testkit.StartClusterWith(t, testkit.ClusterOptions{Args: []string{"--cluster-require-full-coverage", "no"}})
			// a call that waited for the failed master takes the whole
			// timeout; a healthy master's answer takes far less, even on a
			// loaded machine
			const timeout = 2 * time.Second
			addrs, _ := json.Marshal(cluster.Addrs())
			s := provisionRedisStore(t, fmt.Sprintf(`{"addresses":%s,"timeout":%d}`, addrs, timeout))
			ctx := context.Background()
			keys := keysByMaster(t, cluster, 200)
			failed := cluster.Nodes[0]
			for _, ks := range keys { // every node met before the failure
				if _, err := s.Claim(ctx, ks[0], "warm", time.Minute); err != nil {
					t.Fatal(err)
				}
			}

			if failure == "paused" {
				failed.Pause()
				defer failed.Resume()
			} else {
				failed.Kill()
			}
			failedAt := time.Now()

			// the healthy masters' keys, claimed, completed and replayed by
			// eight requests at a time: while the failed master's keys are
			// tried (calls of both would share batches), and after its
			// breaker opened
			var healthy []string
			for addr, ks := range keys {
				if addr != failed.Addr() {
					healthy = append(healthy, ks[1:]...)
				}
			}
			var mu sync.Mutex
			var healthyErrs []string
			var slowest time.Duration
			healthyCalls := 0
			exercise := func(keys []string) *sync.WaitGroup {
				work := make(chan string)
				var wg sync.WaitGroup
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for key := range work {
							for _, err := range claimCompleteReplay(ctx, s, key, &mu, &healthyCalls, &slowest) {
								mu.Lock()
								healthyErrs = append(healthyErrs, fmt.Sprintf("%s: %v", key, err))
								mu.Unlock()
							}
						}
					}()
				}
				go func() {
					for _, k := range keys {
						work <- k
					}
					close(work)
				}()
				return &wg
			}
			during := exercise(healthy[:len(healthy)/2])
			var open sync.WaitGroup
			var openErr error
			var openAfter int
			var tries int
			failedKeys := make(chan string, len(keys[failed.Addr()]))
			for _, k := range keys[failed.Addr()][1:] {
				failedKeys <- k
			}
			close(failedKeys)
			for range 4 {
				open.Add(1)
				go func() {
					defer open.Done()
					for key := range failedKeys {
						_, err := s.Claim(ctx, key, "x", time.Minute)
						mu.Lock()
						tries++
						if err == nil {
							healthyErrs = append(healthyErrs, "claim of "+key+" on the failed master succeeded")
						}
						if errors.Is(err, errRedisBreakerOpen) && openErr == nil {
							openAfter, openErr = tries, err
						}
						done := openErr != nil
						mu.Unlock()
						if done {
							return
						}
					}
				}()
			}
			open.Wait()
			during.Wait()
			exercise(healthy[len(healthy)/2:]).Wait()
			t.Logf("%s master: %d calls on the healthy masters, the slowest %v; breaker open after %d calls, %v after the failure",
				failure, healthyCalls, slowest, openAfter, time.Since(failedAt).Round(time.Millisecond))
			if len(healthyErrs) > 0 {
				t.Fatalf("%d of %d calls on the healthy masters failed while one master was %s: %v", len(healthyErrs), healthyCalls, failure, healthyErrs[:min(5, len(healthyErrs))])
			}
			if slowest >= timeout {
				t.Fatalf("a call on a healthy master took %v (timeout %v): it waited for the %s master", slowest, timeout, failure)
			}
			if openErr == nil || openAfter > breakerThreshold+8 {
				t.Fatalf("the %s master's breaker did not open within %d calls: %v", failure, breakerThreshold+8, openErr)
			}
			// its keys fail at once while its breaker is open
			for _, key := range keys[failed.Addr()][180:190] {
				start := time.Now()
				_, err := s.Claim(ctx, key, "x", time.Minute)
				if !errors.Is(err, errRedisBreakerOpen) {
					t.Fatalf("claim of %s with its master's breaker open: %v", key, err)
				}
				if d := time.Since(start); d > timeout/3 {
					t.Fatalf("claim of %s with its master's breaker open took %v", key, d)
				}
			}

			if failure == "killed" {
				failed.Restart() // an empty master, back on its address
			} else {
				failed.Resume()
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, err := s.Claim(ctx, keys[failed.Addr()][199], "back", time.Minute)
				if err == nil && res.State == store.StateClaimed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the %s master's keys did not work again within 10s of it answering: %v", failure, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// claimCompleteReplay claims key, completes it and claims it again (a
// replay), counting the calls and the slowest in calls and slowest
// (guarded by mu); it returns what went wrong.
func claimCompleteReplay(ctx context.Context, s *Store, key string, mu *sync.Mutex, calls *int, slowest *time.Duration) []error {
	owner := store.NewOwner()
	rec := testRecord(key)
	var errs []error
	for _, step := range []func() error{
		func() error {
			res, err := s.Claim(ctx, key, owner, time.Minute)
			if err == nil && res.State != store.StateClaimed {
				err = fmt.Errorf("claim: %v", res.State)
			}
			return err
		},
		func() error { return s.Complete(ctx, key, owner, rec, time.Minute) },
		func() error {
			res, err := s.Claim(ctx, key, store.NewOwner(), time.Minute)
			if err == nil && (res.State != store.StateCompleted || string(res.Record) != string(rec)) {
				err = fmt.Errorf("replay: %v", res.State)
			}
			return err
		},
	} {
		start := time.Now()
		err := step()
		d := time.Since(start)
		mu.Lock()
		*calls++
		*slowest = max(*slowest, d)
		mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
