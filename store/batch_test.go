package store

import (
	"errors"
	"fmt"
	"testing"
)

func TestCheckBatch(t *testing.T) {
	for _, n := range []int{2, 3, 17, 100, 999, MaxBatchKeys} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("idem:test:%d", i)
		}
		if err := CheckBatch(keys); err != nil {
			t.Fatalf("%d distinct keys: %v", n, err)
		}
		for _, at := range [][2]int{{0, n - 1}, {n / 2, n/2 + 1}, {n - 2, n - 1}} {
			if at[0] == at[1] || at[1] >= n {
				continue
			}
			dup := append([]string(nil), keys...)
			dup[at[1]] = dup[at[0]]
			if err := CheckBatch(dup); !errors.Is(err, ErrBatchDuplicate) {
				t.Fatalf("%d keys, the key at %d again at %d: %v, want ErrBatchDuplicate", n, at[0], at[1], err)
			}
		}
	}
	over := make([]string, MaxBatchKeys+1)
	for i := range over {
		over[i] = fmt.Sprint(i)
	}
	if err := CheckBatch(over); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("%d keys: %v, want ErrBatchTooLarge", len(over), err)
	}
	if err := CheckBatch(nil); err != nil {
		t.Fatalf("no keys: %v", err)
	}
	if err := CheckBatchRecords([]string{"a", "b", "c"}, [][]byte{{1}, {2}}); !errors.Is(err, ErrBatchRecordCount) {
		t.Fatalf("3 keys, 2 records: %v, want ErrBatchRecordCount", err)
	}
	for _, recs := range [][][]byte{{{1}}, {{1}, {2}, {3}}} {
		if err := CheckBatchRecords([]string{"a", "b", "c"}, recs); err != nil {
			t.Fatalf("3 keys, %d records: %v", len(recs), err)
		}
	}
}

func TestNotOwnerError(t *testing.T) {
	if NotOwned(nil) != nil {
		t.Fatal("NotOwned of no keys is an error")
	}
	err := NotOwned([]int{1, 4})
	var e *NotOwnerError
	if !errors.Is(err, ErrNotOwner) || !errors.As(fmt.Errorf("wrapped: %w", err), &e) || len(e.Index) != 2 {
		t.Fatalf("NotOwned: %v does not match ErrNotOwner with its keys", err)
	}
	if got, want := err.Error(), "2 idempotency keys of the batch are no longer owned by this request (items 1 4)"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
