package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// BenchmarkServeHTTPRedisReplicas is a new delivery (1 KiB) on a Redis
// master with one replica, both started for the benchmark on this host,
// with the redis store's `replicas 0` (the baseline) and `replicas 1`
// (docs/stores.md, "Failover"): in inbox mode the acceptance is followed
// by a WAIT for the replica before the key is completed and 202 answered;
// in dedup mode `replicas 1 completions` makes the completion wait so
// (the claim is not waited for). The inbox delivers nothing during the
// run (its workers start with the configuration, which a benchmark does
// not start). "serial" sends one request at a time, "parallel" 16 per CPU
// at once. Besides the process's CPU it reports the master's commands per
// delivery (cmds/op, INFO commandstats, those scripts run included),
// WAITs per delivery and the master's CPU per delivery (redis-us/op).
//
//	go test -run '^$' -bench 'ServeHTTPRedisReplicas' -benchmem -count 3 .
func BenchmarkServeHTTPRedisReplicas(b *testing.B) {
	master := testkit.StartRedis(b)
	testkit.StartReplica(b, master)
	rc := master.Client(b)
	for _, mode := range []string{"dedup", "inbox"} {
		for _, replicas := range []int{0, 1} {
			for _, parallel := range []bool{false, true} {
				name := fmt.Sprintf("%s/replicas=%d/%s", mode, replicas, map[bool]string{false: "serial", true: "parallel"}[parallel])
				b.Run(name, func(b *testing.B) {
					cfg := fmt.Sprintf(`{"module":"redis","addresses":[%q],"replicas":%d`, master.Addr(), replicas)
					h := &Handler{Source: "replicas_" + strconv.FormatInt(benchRun.Add(1), 10)}
					status := http.StatusOK
					if mode == "inbox" {
						h.Inbox = &InboxConfig{DeliverTo: "http://127.0.0.1:9/hook"}
						status = http.StatusAccepted
					} else if replicas > 0 {
						cfg += `,"replicas_completions":true`
					}
					h.StoreRaw = json.RawMessage(cfg + "}")
					h = newBenchHandler(b, h)
					cmds0, cpu0 := testkit.RedisCommands(b, rc), testkit.RedisCPU(b, rc)
					benchNewDeliveries(b, h, status, parallel)
					cmds := testkit.RedisCommands(b, rc)
					var n int64
					for name, calls := range cmds {
						if name != "info" { // the benchmark's own reads
							n += calls - cmds0[name]
						}
					}
					b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
					b.ReportMetric(float64(cmds["wait"]-cmds0["wait"])/float64(b.N), "waits/op")
					b.ReportMetric((testkit.RedisCPU(b, rc)-cpu0)*1e6/float64(b.N), "redis-us/op")
				})
			}
		}
	}
}

// benchNewDeliveries sends b.N new deliveries of 1 KiB to h, one at a time
// or 16 per CPU at once, each of which must be answered status, and
// reports the process's CPU per delivery.
func benchNewDeliveries(b *testing.B, h *Handler, status int, parallel bool) {
	prefix := "evt_" + strconv.FormatInt(benchRun.Add(1), 10) + "_"
	var seq atomic.Int64
	send := func(br *benchRequest, w *benchResponseWriter) bool {
		w.reset()
		key := prefix + strconv.FormatInt(seq.Add(1), 10)
		if err := h.ServeHTTP(w, br.reset(key), benchNext); err != nil || w.status != status || w.h.Get(record.ReplayedHeader) != "" {
			b.Errorf("not a new delivery: status %d, want %d; header %v, err %v", w.status, status, w.h, err)
			return false
		}
		return true
	}
	b.SetBytes(1 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testkit.CPUTime()
	if parallel {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			br, w := newBenchRequest(1<<10, false), &benchResponseWriter{h: make(http.Header)}
			for pb.Next() {
				if !send(br, w) {
					return
				}
			}
		})
	} else {
		br, w := newBenchRequest(1<<10, false), &benchResponseWriter{h: make(http.Header)}
		for range b.N {
			if !send(br, w) {
				break
			}
		}
	}
	reportCPU(b, cpu)
	b.StopTimer()
}
