package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Real Redis servers for the tests: standalone, Cluster and Sentinel, each
// on free ports in a temporary directory, stopped when the test ends.
// redis-server and redis-cli (Redis >= 7) must be installed; `make test`
// installs them. A test never skips for want of them: it fails, saying
// how to install them.

// RequireRedisBinaries fails the test unless redis-server and redis-cli
// are on PATH.
func RequireRedisBinaries(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH: the Redis store tests need a real Redis >= 7; install redis-server and redis-tools (e.g. apt-get install redis-server) or run `make test`, which installs them", bin)
		}
	}
}

// Redis is one redis-server process started by a test.
type Redis struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Addr is the server's host:port.
func (s *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port is the server's port.
func (s *Redis) Port() int { return s.port }

// StartRedis starts a standalone redis-server on a free port; extra are
// more `--name value` arguments.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	RequireRedisBinaries(t)
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		s := &Redis{t: t, port: FreePort(t), dir: t.TempDir()}
		s.args = append([]string{
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--loglevel", "warning",
			"--logfile", filepath.Join(s.dir, "redis.log"),
		}, extra...)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

// start runs redis-server with s.args and waits until it answers PING.
func (s *Redis) start() error {
	cmd := exec.Command("redis-server", s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		if Ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redis-server on port %d did not answer within 30s", s.port)
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Redis) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server must die too
	_ = cmd.Process.Kill()
	// wait until the port is free again
	for range 200 {
		if Ping(s.Addr()) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port, with an empty data set.
func (s *Redis) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// Pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a hung server or a network black hole.
func (s *Redis) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Redis) Resume() { s.signal(syscall.SIGCONT) }

func (s *Redis) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Client returns a go-redis client for checks in tests.
func (s *Redis) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Ping checks that a Redis server answers on addr, with a raw
// connection so no client is left behind.
func Ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		return err
	}
	// a server that requires a password answers -NOAUTH: it is up
	if a := string(buf[:n]); !strings.HasPrefix(a, "+PONG") && !strings.HasPrefix(a, "-NOAUTH") {
		return fmt.Errorf("unexpected answer %q", buf[:n])
	}
	return nil
}

// RedisCLI runs redis-cli with args and returns its output.
func RedisCLI(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Cluster is a Redis Cluster: its masters and, with replicas, theirs.
type Cluster struct {
	Nodes    []*Redis // the masters it was created with
	Replicas []*Redis // the replicas it was created with, Replicas[i] of Nodes[i]
}

// Addrs returns the Nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// StoreBlock is the Caddyfile `store redis` block that addresses every
// node of the cluster, with lines (such as "timeout 5s") added inside.
func (c *Cluster) StoreBlock(lines ...string) string {
	block := "store redis {\n\t\t\taddress " + strings.Join(c.Addrs(), " ")
	for _, line := range lines {
		block += "\n\t\t\t" + line
	}
	return block + "\n\t\t}"
}

// Client returns a go-redis cluster client for checks in tests.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// ClusterOptions configure StartClusterWith.
type ClusterOptions struct {
	// Replicas is the number of replicas of each master: 0 or 1.
	Replicas int
	// NodeTimeout is cluster-node-timeout, after which an unreachable
	// master is failed over. Default: 5s.
	NodeTimeout time.Duration
	// Args are more `--name value` arguments for every node.
	Args []string
}

// StartCluster starts three masters with cluster mode on, joins them
// with `redis-cli --cluster create` and waits until every slot is served.
func StartCluster(t testing.TB) *Cluster { return StartClusterWith(t, ClusterOptions{}) }

// StartClusterWith starts three masters, and opts.Replicas replicas of
// each, with cluster mode on, joins them with `redis-cli --cluster create`
// and waits until every slot is served and every replica is in sync.
func StartClusterWith(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Replicas < 0 || opts.Replicas > 1 {
		t.Fatalf("StartClusterWith: %d replicas per master; 0 or 1 are supported", opts.Replicas)
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = 5 * time.Second
	}
	var all []*Redis
	for range 3 * (1 + opts.Replicas) {
		all = append(all, StartRedis(t, append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "Nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(FreePort(t)),
		}, opts.Args...)...))
	}
	addrs := make([]string, len(all))
	for i, n := range all {
		addrs[i] = n.Addr()
	}
	RedisCLI(t, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")...)
	c := &Cluster{}
	byAddr := make(map[string]*Redis)
	for _, n := range all {
		byAddr[n.Addr()] = n
	}
	known := "cluster_known_nodes:" + strconv.Itoa(len(all))
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range all {
		for {
			info := RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(n.port), "cluster", "info")
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster did not become ready: %s", info)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// redis-cli makes the first three masters; a replica is in sync once
	// its link to its master is up
	c.Nodes = all[:3]
	for _, m := range c.Nodes {
		for {
			r := c.replicaOf(t, m, all[3:])
			if r != nil && strings.Contains(RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(r.port), "info", "replication"), "master_link_status:up") {
				c.Replicas = append(c.Replicas, r)
				break
			}
			if opts.Replicas == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica of %s is not in sync", m.Addr())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c
}

// replicaOf returns the node of candidates that replicates m, or nil.
func (c *Cluster) replicaOf(t testing.TB, m *Redis, candidates []*Redis) *Redis {
	for _, r := range candidates {
		role := RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(r.port), "role")
		if strings.HasPrefix(role, "slave\n") && strings.Contains(role, "\n"+strconv.Itoa(m.port)+"\n") {
			return r
		}
	}
	return nil
}

// MasterOf returns the node that serves key now, as a node of the cluster
// answers CLUSTER SHARDS (asked of asking, which must answer).
func (c *Cluster) MasterOf(t testing.TB, asking *Redis, key string) *Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc := asking.Client(t)
	slot, err := rc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if slot < r.Start || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					for _, node := range append(append([]*Redis(nil), c.Nodes...), c.Replicas...) {
						if node.port == int(n.Port) {
							return node
						}
					}
				}
			}
		}
	}
	t.Fatalf("no master of %s (slot %d) among the cluster's nodes", key, slot)
	return nil
}

// Role returns the node's role as it says: "master" or "slave".
func (s *Redis) Role(t testing.TB) string {
	out := RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "role")
	role, _, _ := strings.Cut(out, "\n")
	return role
}

// Sentinel is a master watched by one Sentinel.
type Sentinel struct {
	Master     *Redis
	Node       *Redis // the Sentinel
	MasterName string
}

// StartSentinel starts a master and one Sentinel that monitors it under
// the name "mymaster".
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	master := StartRedis(t)
	RequireRedisBinaries(t)
	var lastErr error
	for range 3 {
		s := &Redis{t: t, port: FreePort(t), dir: t.TempDir()}
		conf := filepath.Join(s.dir, "sentinel.conf")
		body := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor mymaster 127.0.0.1 %d 1
sentinel down-after-milliseconds mymaster 5000
`, s.port, s.dir, filepath.Join(s.dir, "redis.log"), master.port)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
		if lastErr = s.start(); lastErr != nil {
			continue
		}
		t.Cleanup(s.Kill)
		deadline := time.Now().Add(10 * time.Second)
		for {
			out := RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "sentinel", "get-master-addr-by-name", "mymaster")
			if strings.Contains(out, strconv.Itoa(master.port)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel does not know the master: %s", out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return &Sentinel{Master: master, Node: s, MasterName: "mymaster"}
	}
	t.Fatalf("starting redis sentinel: %v", lastErr)
	return nil
}

// StartReplica starts a redis-server that replicates master and waits
// until it is in sync; extra are more `--name value` arguments.
func StartReplica(t testing.TB, master *Redis, extra ...string) *Redis {
	t.Helper()
	r := StartRedis(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}, extra...)...)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(RedisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(r.port), "info", "replication"), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s of %s is not in sync within 20s", r.Addr(), master.Addr())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return r
}

// FieldString is the value of a field of a Redis stream entry (go-redis
// gives each as an any) as a string; "" when the entry has no such field.
func FieldString(v any) string {
	s, _ := v.(string)
	return s
}
