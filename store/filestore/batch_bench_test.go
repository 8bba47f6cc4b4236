package filestore

import (
	"path/filepath"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

// BenchmarkBatchClaim: a 100-item batch claimed in one call against one
// Claim per item, the items new or seen (storetest.BenchBatchClaim), on a
// file of its own with `sync always`. The seen items are in memory (the
// records cached, as after their completion); reads counts the read
// transactions of the file per op (none while memory knows the keys).
//
//	go test -run '^$' -bench BatchClaim -benchmem ./store/filestore
func BenchmarkBatchClaim(b *testing.B) {
	ctx, cancel := testkit.NewContext(b)
	defer cancel()
	s := &Store{Path: filepath.Join(b.TempDir(), "store.db")}
	if err := s.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Cleanup()
	d := s.use.file()
	storetest.BenchBatchClaim(b, s, map[string]func() int64{
		"cpu-ns/op": func() int64 { return int64(testkit.CPUTime()) },
		"reads/op":  func() int64 { return int64(d.bolt.Stats().TxN) },
	})
}
