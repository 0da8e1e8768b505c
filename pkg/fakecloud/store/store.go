// Package store persists fakecloud's records in an embedded bbolt database: one bucket per kind of record, one
// key per record, every change of one API call committed in one fsynced transaction.
package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Store is a durable map of kind → id → bytes.
type Store struct {
	db  *bolt.DB
	dir string
}

// Options tune durability; the zero value is fully durable.
type Options struct {
	// NoSync skips fsync on commit: faster, but a crash may lose the last changes. For benchmarks.
	NoSync bool
}

// Open opens (or creates) the database file.
func Open(path string, opts Options) (*Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, NoSync: opts.NoSync})
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	return &Store{db: db, dir: filepath.Dir(path)}, nil
}

// Change is one record to write (Value non-nil) or remove (Value nil).
type Change struct {
	Kind  string
	ID    string
	Value []byte
}

// Commit applies changes atomically. A commit that failed for want of space matches unix.ENOSPC, so that the
// client is told the cloud is full rather than broken.
func (s *Store) Commit(changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, c := range changes {
			b, err := tx.CreateBucketIfNotExists([]byte(c.Kind))
			if err != nil {
				return fmt.Errorf("bucket %s: %w", c.Kind, err)
			}
			if c.Value == nil {
				err = b.Delete([]byte(c.ID))
			} else {
				err = b.Put([]byte(c.ID), c.Value)
			}
			if err != nil {
				return fmt.Errorf("write %s/%s: %w", c.Kind, c.ID, err)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, unix.ENOSPC) && s.nearlyFull() {
		// bbolt words some failures (growing its file) without their errno; a filesystem with less room than
		// one growth step explains them.
		return fmt.Errorf("%w (%w)", err, unix.ENOSPC)
	}
	return err
}

// growthStep is the most bbolt grows its file by at once (its default AllocSize).
const growthStep = 16 << 20

// nearlyFull reports whether the store's filesystem has less room than one growth step of the database.
func (s *Store) nearlyFull() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return false
	}
	return int64(st.Bavail)*int64(st.Bsize) < growthStep
}

// ForEach calls fn for every record of a kind, in key order.
func (s *Store) ForEach(kind string, fn func(id string, value []byte) error) error {
	return s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(kind))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error { return fn(string(k), v) })
	})
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }
