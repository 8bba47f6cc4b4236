package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Value is one live value of a file store, as Export reads it.
type Value struct {
	Key string
	// Note tells a note (the first key its signed bytes came under) from
	// a completed key's record.
	Note    bool
	Payload []byte // the record, or the note's first key
	Expires time.Time
}

// Export reads every live value of the store file at path, in key order,
// for moving them to another store (`caddy webhook-idempotency migrate`).
// The file is opened read-only: it fails within a second, saying so, while
// a Caddy has it open.
func Export(path string, fn func(Value) error) error {
	if err := preflight(path); err != nil {
		return corrupt(path, err)
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("file store: %s is in use: stop the Caddy that has it open first (its providers retry what it does not answer meanwhile)", path)
	}
	if err != nil {
		return fmt.Errorf("file store: opening %s: %v", path, err)
	}
	defer b.Close()
	nowNano := now().UnixNano()
	return b.View(func(tx *bolt.Tx) error {
		records := tx.Bucket(bucketRecords)
		if records == nil {
			return nil
		}
		return records.ForEach(func(k, v []byte) error {
			if len(v) < 9 {
				return nil
			}
			expires := int64(binary.BigEndian.Uint64(v))
			if expires <= nowNano {
				return nil
			}
			return fn(Value{
				Key: string(k), Note: v[8] == kindNote, Payload: append([]byte(nil), v[9:]...),
				Expires: time.Unix(0, expires),
			})
		})
	})
}
