package memstore

import (
	"testing"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store/storetest"
)

// BenchmarkBatchClaim: a 100-item batch claimed in one call against one
// Claim per item, the items new or seen (storetest.BenchBatchClaim).
//
//	go test -run '^$' -bench BatchClaim -benchmem ./store/memstore
func BenchmarkBatchClaim(b *testing.B) {
	m := &Store{table: newMemoryTable(zap.NewNop())}
	defer m.table.Destruct()
	storetest.BenchBatchClaim(b, m, map[string]func() int64{
		"cpu-ns/op": func() int64 { return int64(testkit.CPUTime()) },
	})
}
