package series

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// What the series cost Redis (docs/scale.md): a flush's CPU and commands,
// and the memory of one source's series once every bucket it keeps is
// there. Three shapes of a flush, as a busy source writes them every
// second:
//   - route: the results new and replayed, 20 buckets of the handling time
//     and 20 of the application's (a source's durations spread over some
//     20 buckets at load);
//   - inbox: the same with the inbox's outcomes delivered and retried, 20
//     buckets of the delivery lag and the backlog;
//   - bound: every counter and every histogram bucket, the most a bucket
//     can hold.
//
//	go test -run '^$' -bench 'RedisSeriesFlush' -benchtime 3000x ./internal/series
//	go test -run '^$' -bench 'RedisSeriesKept' -benchtime 1x ./internal/series

// seriesShape builds a write of a shape at.
func seriesShape(shape string, at time.Time) *write {
	w := &write{at: at}
	spread := func(h, from, n int) {
		for b := from; b < from+n && b < numBuckets; b++ {
			w.buckets = append(w.buckets, field{bucketNames[h][b], int64(1 + b%7)})
		}
	}
	switch shape {
	case "route", "inbox":
		w.counts = append(w.counts, field{counterNames[iNew], 1190}, field{counterNames[iReplayed], 10})
		spread(histHandled, 30, 20)
		spread(histApp, 34, 20)
		if shape == "inbox" {
			w.counts = append(w.counts, field{counterNames[delivered], 1195}, field{counterNames[retried], 5})
			spread(histLag, 40, 20)
			w.highs = append(w.highs, field{fieldBacklog, 37})
		}
	case "bound":
		for i, name := range counterNames {
			w.counts = append(w.counts, field{name, int64(1000 + i)})
		}
		for h := range numHists {
			spread(h, 0, numBuckets)
		}
		w.highs = append(w.highs, field{fieldBacklog, 1 << 20})
	default:
		panic("unknown shape " + shape)
	}
	return w
}

var seriesShapes = []string{"route", "inbox", "bound"}

// commands is the number of commands Redis ran, INFO's left out.
func commands(byName map[string]int64) (n float64) {
	for name, calls := range byName {
		if name != "info" {
			n += float64(calls)
		}
	}
	return n
}

// BenchmarkRedisSeriesFlush: one flush of a source, one at a time as a
// recorder sends them (a script call of its own, never in a pipeline with
// other calls), into the buckets of the current minute and hour.
// Reports Redis's CPU per flush and the commands it runs.
func BenchmarkRedisSeriesFlush(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	for _, shape := range seriesShapes {
		b.Run(shape, func(b *testing.B) {
			be, err := newRedisBackend(openRedis(b, srv.Addr()).Streams(), "flush-"+shape)
			if err != nil {
				b.Fatal(err)
			}
			defer be.close()
			ctx := context.Background()
			w := seriesShape(shape, time.Now())
			if err := be.add(ctx, w); err != nil { // loads the script
				b.Fatal(err)
			}
			cpu0, cmd0 := testkit.RedisCPU(b, rc), commands(testkit.RedisCommands(b, rc))
			b.ResetTimer()
			for range b.N {
				if err := be.add(ctx, w); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu1, cmd1 := testkit.RedisCPU(b, rc), commands(testkit.RedisCommands(b, rc))
			b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-µs/flush")
			b.ReportMetric((cmd1-cmd0)/float64(b.N), "commands/flush")
		})
	}
}

// BenchmarkRedisSeriesKept: a source's series as Redis keeps it when the
// source was busy every minute: a minute's hash for each of 25 hours
// (1,500) and an hour's for each of 8 days (192), each written with a
// flush of its shape, and the totals. Reports MEMORY USAGE of a minute's
// hash and of an hour's, their sum over the source's keys, and
// used_memory's growth, per source.
func BenchmarkRedisSeriesKept(b *testing.B) {
	srv := testkit.StartRedis(b)
	rc := srv.Client(b)
	for _, shape := range seriesShapes {
		b.Run(shape, func(b *testing.B) {
			st := openRedis(b, srv.Addr()).Streams()
			ctx := context.Background()
			var minute, hour, kept, used float64
			for i := range b.N {
				be, err := newRedisBackend(st, fmt.Sprintf("kept-%s-%d", shape, i))
				if err != nil {
					b.Fatal(err)
				}
				mem0 := testkit.RedisUsedMemory(b, rc)
				now := time.Now()
				nowMinute := minutes.unitOf(now)
				keepMinutes := int64(minutes.keep / minutes.unit)
				for m := range keepMinutes {
					if err := be.add(ctx, seriesShape(shape, now.Add(-time.Duration(m)*time.Minute))); err != nil {
						b.Fatal(err)
					}
				}
				for h := range int64(hours.keep / hours.unit) {
					at := now.Add(-time.Duration(h) * time.Hour)
					if err := be.add(ctx, seriesShape(shape, at)); err != nil {
						b.Fatal(err)
					}
					// only the hour's bucket: a minute older than the minutes
					// kept would not be there
					if minutes.unitOf(at) <= nowMinute-keepMinutes {
						if err := rc.Del(ctx, be.key(minutes, minutes.unitOf(at))).Err(); err != nil {
							b.Fatal(err)
						}
					}
				}
				used += testkit.RedisUsedMemory(b, rc) - mem0
				var count, sum [2]float64
				iter := rc.Scan(ctx, 0, be.prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					k := iter.Val()
					u, err := rc.MemoryUsage(ctx, k, 0).Result()
					if err != nil {
						b.Fatal(err)
					}
					kept += float64(u)
					switch {
					case strings.HasPrefix(k, be.prefix+":m:"):
						sum[0] += float64(u)
						count[0]++
					case strings.HasPrefix(k, be.prefix+":h:"):
						sum[1] += float64(u)
						count[1]++
					}
				}
				if err := iter.Err(); err != nil {
					b.Fatal(err)
				}
				if count[0] != float64(keepMinutes) || count[1] < float64(hours.keep/hours.unit) {
					b.Fatalf("%v minutes' and %v hours' hashes, want %d and at least %d", count[0], count[1], keepMinutes, hours.keep/hours.unit)
				}
				minute += sum[0] / count[0]
				hour += sum[1] / count[1]
				be.close()
			}
			n := float64(b.N)
			b.ReportMetric(minute/n, "B/minute")
			b.ReportMetric(hour/n, "B/hour")
			b.ReportMetric(kept/n, "B-kept")
			b.ReportMetric(used/n, "B-used_memory")
		})
	}
}
