package webhookidempotency

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

// This file starts real Redis servers for the tests: standalone, Cluster
// and Sentinel, each on free ports in a temporary directory, stopped when
// the test ends. redis-server and redis-cli (Redis >= 7) must be installed;
// `make test` installs them.

// requireRedisBinaries fails the test unless redis-server and redis-cli
// are on PATH.
func requireRedisBinaries(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH: the Redis store tests need a real Redis >= 7; install redis-server and redis-tools (e.g. apt-get install redis-server) or run `make test`, which installs them", bin)
		}
	}
}

// redisServer is one redis-server process started by a test.
type redisServer struct {
	t    testing.TB
	port int
	dir  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// addr is the server's host:port.
func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// startRedis starts a standalone redis-server on a free port; extra are
// more `--name value` arguments.
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	requireRedisBinaries(t)
	var lastErr error
	for range 3 { // the free port may be taken before redis-server binds it
		s := &redisServer{t: t, port: freePort(t), dir: t.TempDir()}
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
			t.Cleanup(s.kill)
			return s
		}
	}
	t.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

// start runs redis-server with s.args and waits until it answers PING.
func (s *redisServer) start() error {
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
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		if redisPing(s.addr()) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	return fmt.Errorf("redis-server on port %d did not answer within 10s", s.port)
}

// kill stops the server at once (SIGKILL), as a crash would.
func (s *redisServer) kill() {
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
		if redisPing(s.addr()) != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restart starts the server again on the same port, with an empty data set.
func (s *redisServer) restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting redis-server: %v", err)
	}
}

// pause freezes the server (SIGSTOP): connections stay open and nothing
// answers, as with a hung server or a network black hole.
func (s *redisServer) pause() { s.signal(syscall.SIGSTOP) }

// resume undoes pause.
func (s *redisServer) resume() { s.signal(syscall.SIGCONT) }

func (s *redisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// client returns a go-redis client for checks in tests.
func (s *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Protocol: 2})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisPing checks that a Redis server answers on addr, with a raw
// connection so no client is left behind.
func redisPing(addr string) error {
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

// redisCLI runs redis-cli with args and returns its output.
func redisCLI(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// redisCluster is a Redis Cluster of masters without replicas.
type redisCluster struct {
	nodes []*redisServer
}

// addrs returns the nodes' addresses.
func (c *redisCluster) addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr()
	}
	return addrs
}

// storeBlock is the Caddyfile `store redis` block that addresses every
// node of the cluster, with lines (such as "timeout 5s") added inside.
func (c *redisCluster) storeBlock(lines ...string) string {
	block := "store redis {\n\t\t\taddress " + strings.Join(c.addrs(), " ")
	for _, line := range lines {
		block += "\n\t\t\t" + line
	}
	return block + "\n\t\t}"
}

// client returns a go-redis cluster client for checks in tests.
func (c *redisCluster) client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), Protocol: 2})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// startRedisCluster starts three masters with cluster mode on, joins them
// with `redis-cli --cluster create` and waits until every slot is served.
func startRedisCluster(t testing.TB) *redisCluster {
	t.Helper()
	c := &redisCluster{}
	for range 3 {
		c.nodes = append(c.nodes, startRedis(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-port", strconv.Itoa(freePort(t)),
		))
	}
	redisCLI(t, append(append([]string{"--cluster", "create"}, c.addrs()...), "--cluster-replicas", "0", "--cluster-yes")...)
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.nodes {
		for {
			info := redisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(n.port), "cluster", "info")
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster did not become ready: %s", info)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c
}

// redisSentinel is a master watched by one Sentinel.
type redisSentinel struct {
	master     *redisServer
	sentinel   *redisServer
	masterName string
}

// startSentinel starts a master and one Sentinel that monitors it under
// the name "mymaster".
func startSentinel(t testing.TB) *redisSentinel {
	t.Helper()
	master := startRedis(t)
	requireRedisBinaries(t)
	var lastErr error
	for range 3 {
		s := &redisServer{t: t, port: freePort(t), dir: t.TempDir()}
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
		t.Cleanup(s.kill)
		deadline := time.Now().Add(10 * time.Second)
		for {
			out := redisCLI(t, "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "sentinel", "get-master-addr-by-name", "mymaster")
			if strings.Contains(out, strconv.Itoa(master.port)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel does not know the master: %s", out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return &redisSentinel{master: master, sentinel: s, masterName: "mymaster"}
	}
	t.Fatalf("starting redis sentinel: %v", lastErr)
	return nil
}
