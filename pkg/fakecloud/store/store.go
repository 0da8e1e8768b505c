// Package store persists fakecloud's records in an embedded bbolt database: one bucket per kind of record, one
// key per record, every change of one API call committed in one fsynced transaction.
package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Store is a durable map of kind → id → bytes.
type Store struct {
	db *bolt.DB
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
	return &Store{db: db}, nil
}

// Change is one record to write (Value non-nil) or remove (Value nil).
type Change struct {
	Kind  string
	ID    string
	Value []byte
}

// Commit applies changes atomically.
func (s *Store) Commit(changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
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
