package filestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
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
// for moving them to another store (`caddy webhook-idempotency migrate`):
// those in its tree, and those its log holds that the tree does not have
// yet (a Caddy that ended without a graceful stop). The files are opened
// read-only: it fails within a second, saying so, while a Caddy has them
// open.
func Export(path string, fn func(Value) error) error {
	err := preflight(path)
	if err != nil && !errors.Is(err, errInUse) {
		return corrupt(path, err)
	}
	var b *bolt.DB
	if err == nil {
		b, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	}
	if errors.Is(err, errInUse) || errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("file store: %s is in use: stop the Caddy that has it open first (its providers retry what it does not answer meanwhile)", path)
	}
	if err != nil {
		return fmt.Errorf("file store: opening %s: %v", path, err)
	}
	defer b.Close()
	nowNano := now().UnixNano()
	return b.View(func(tx *bolt.Tx) error {
		var applied uint64
		if lb := tx.Bucket(bucketLog); lb != nil {
			if v := lb.Get(keyApplied); len(v) == 8 {
				applied = binary.BigEndian.Uint64(v)
			}
		}
		recs, err := readLogFile(path, applied)
		if err != nil {
			return fmt.Errorf("file store: reading the log of %s: %v", path, err)
		}
		logged := map[string]put{} // the latest of each key
		for _, r := range recs {
			for _, p := range r.puts {
				logged[p.key] = p
			}
		}
		emit := func(key string, kind byte, payload []byte, expires int64) error {
			if expires <= nowNano {
				return nil
			}
			return fn(Value{Key: key, Note: kind == kindNote, Payload: payload, Expires: time.Unix(0, expires)})
		}
		fromLog := func(p put) error { return emit(p.key, p.kind, []byte(p.payload), p.expires) }
		// the log's keys in order, merged with the tree's
		keys := slices.Sorted(maps.Keys(logged))
		if records := tx.Bucket(bucketRecords); records != nil {
			err := records.ForEach(func(k, v []byte) error {
				for len(keys) > 0 && keys[0] < string(k) {
					if err := fromLog(logged[keys[0]]); err != nil {
						return err
					}
					keys = keys[1:]
				}
				if len(keys) > 0 && keys[0] == string(k) {
					keys = keys[1:]
					return fromLog(logged[string(k)])
				}
				if len(v) < 9 {
					return nil
				}
				return emit(string(k), v[8], append([]byte(nil), v[9:]...), int64(binary.BigEndian.Uint64(v)))
			})
			if err != nil {
				return err
			}
		}
		for _, k := range keys {
			if err := fromLog(logged[k]); err != nil {
				return err
			}
		}
		return nil
	})
}
