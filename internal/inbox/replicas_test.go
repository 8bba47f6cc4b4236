package inbox

import (
	"errors"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// An acceptance too few replicas acknowledged (`replicas`,
// docs/inbox.md#failover) leaves nothing behind that no worker has taken:
// its key is released, and its event withdrawn, whether it went to the
// stream (with no group, or as the head of its group, which is then
// forgotten) or waited in held behind its group's head; on standalone
// Redis and on a Cluster, where the key and the stream are on different
// masters.
func TestRedisInboxRefusedAcceptanceIsWithdrawn(t *testing.T) {
	for _, topology := range []string{"standalone", "cluster"} {
		t.Run(topology, func(t *testing.T) {
			var addrs []string
			var replica *testkit.Redis
			if topology == "standalone" {
				master := testkit.StartRedis(t)
				replica = testkit.StartReplica(t, master)
				addrs = []string{master.Addr()}
			} else {
				c := testkit.StartClusterWith(t, testkit.ClusterOptions{Replicas: 1})
				m := c.MasterOf(t, c.Nodes[0], "{idem:withdrawn}:inbox")
				for i, n := range c.Nodes {
					if n == m {
						replica = c.Replicas[i]
					}
				}
				addrs = c.Addrs()
			}
			// the timeout is what the healthy replica has to acknowledge the
			// head on a loaded machine (the calls' own timeout is longer); each
			// refusal below waits it out
			s := openRedisStoreWith(t, &redisstore.Store{Addresses: addrs, Replicas: 1, ReplicasTimeout: caddy.Duration(2 * time.Second), Timeout: caddy.Duration(10 * time.Second)})
			ib := newOrderedInbox(t, s, "withdrawn", "http://127.0.0.1:9", nil) // never started: no worker takes anything
			q := ib.q.(*redisQueue)
			p := q.parts[0]
			acceptIn(t, ib, "head", "g1")

			replica.Pause()
			defer replica.Resume()
			for _, tc := range []struct{ key, group string }{{"held", "g1"}, {"head2", "g2"}, {"alone", ""}} {
				if _, err := acceptEvent(t, ib, tc.key, tc.group); !errors.Is(err, redisstore.ErrNotReplicated) {
					t.Fatalf("accepting %s with the replica stopped: %v, want ErrNotReplicated", tc.key, err)
				}
				if n := q.client.Exists(t.Context(), "idem:withdrawn:"+tc.key).Val(); n != 0 {
					t.Fatalf("the key of the refused %s is kept", tc.key)
				}
			}
			ctx := t.Context()
			entries := q.client.XRange(ctx, p.stream(), "-", "+").Val()
			if len(entries) != 1 || entries[0].Values["key"] != "head" {
				t.Fatalf("the stream holds %v, want only the accepted head", entries)
			}
			if n := q.client.Exists(ctx, p.held(), p.keys[4]).Val(); n != 0 {
				t.Fatalf("held or order still exist (%d): the refused held event was not withdrawn", n)
			}
			if heads := q.client.HGetAll(ctx, p.heads()).Val(); len(heads) != 1 || heads["g1"] == "" {
				t.Fatalf("heads %v, want g1's alone", heads)
			}
		})
	}
}
