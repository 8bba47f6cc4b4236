package testkit

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// What a Redis server did, from its INFO, for the benchmarks that report
// Redis's own cost (docs/scale.md): its CPU time, which a loaded machine
// inflates far less than wall time, its commands by name, and its memory.

// RedisCPU is the CPU time a Redis server has used, user and system, in
// seconds (INFO cpu).
func RedisCPU(t testing.TB, c *redis.Client) float64 {
	t.Helper()
	f := redisInfo(t, c, "cpu")
	return f["used_cpu_user"] + f["used_cpu_sys"]
}

// RedisUsedMemory is a Redis server's used_memory, in bytes (INFO memory).
func RedisUsedMemory(t testing.TB, c *redis.Client) float64 {
	t.Helper()
	return redisInfo(t, c, "memory")["used_memory"]
}

// RedisCommands sums INFO commandstats' calls by command (lower case, as
// Redis names them) over clients; the commands scripts run are counted by
// Redis too.
func RedisCommands(t testing.TB, clients ...*redis.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, c := range clients {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\r\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			out[name] += n
		}
	}
	return out
}

// redisInfo reads the numeric fields of a section of INFO.
func redisInfo(t testing.TB, c *redis.Client, section string) map[string]float64 {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out
}
