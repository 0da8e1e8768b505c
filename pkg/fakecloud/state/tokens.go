package state

import (
	"slices"
	"time"
)

// A ClientToken stays bound after its volume is gone, as EC2 keeps idempotency tokens for a while after their
// resource is deleted (how long is not documented; Config.ClientTokenRetention, 24 h by default). Forgetting it
// with the volume would let a retried create whose first reply was lost make a second volume: a client that steps
// to a new token when the old one answers a deleted volume (ec2cloud does, for reused names) gets a new volume
// under the new token, loses the reply, and on its retry finds the old token free again. So a deleted volume
// leaves a tombstone, durable like every record: the token still answers that volume, in state deleted, until
// the retention has passed.

// Tombstone is the last view of a deleted volume that was created with a ClientToken.
type Tombstone struct {
	Volume    Volume    `json:"volume"`
	DeletedAt time.Time `json:"deletedAt"`
}

// tombstones are kept by token, and in order of deletion so that expiry looks only at the oldest. order may hold
// stale entries (a token whose tombstone was dropped when the token made a new volume); expiry skips them.
type tombstones struct {
	byToken map[string]*Tombstone
	order   []buried
}

type buried struct {
	token string
	at    time.Time
}

func newTombstones() tombstones { return tombstones{byToken: map[string]*Tombstone{}} }

// add keeps a tombstone. Loaded ones come in token order, so their order is restored by insertion.
func (t *tombstones) add(token string, tb *Tombstone) {
	t.byToken[token] = tb
	i := len(t.order)
	for i > 0 && t.order[i-1].at.After(tb.DeletedAt) {
		i--
	}
	t.order = slices.Insert(t.order, i, buried{token, tb.DeletedAt})
}

// bury leaves a tombstone for a deleted volume created with a ClientToken, unless tokens are not retained.
func (s *State) bury(now time.Time, v *Volume) {
	if v.ClientToken == "" || s.cfg.ClientTokenRetention <= 0 {
		return
	}
	last := v.view()
	last.State, last.Attachments, last.DueAt = VolumeDeleted, nil, time.Time{}
	s.tombstones.add(v.ClientToken, &Tombstone{Volume: last, DeletedAt: now})
	s.markDirty(kindTombstone, v.ClientToken)
}

// tombstone finds the tombstone of a token, unless it has expired.
func (s *State) tombstone(token string, now time.Time) (*Tombstone, bool) {
	tb, ok := s.tombstones.byToken[token]
	if !ok || !now.Before(tb.DeletedAt.Add(s.cfg.ClientTokenRetention)) {
		return nil, false
	}
	return tb, true
}

// expire drops the tombstones older than the retention.
func (t *tombstones) expire(s *State, now time.Time) {
	for len(t.order) > 0 && !now.Before(t.order[0].at.Add(s.cfg.ClientTokenRetention)) {
		head := t.order[0]
		t.order = t.order[1:]
		if tb, ok := t.byToken[head.token]; ok && tb.DeletedAt.Equal(head.at) {
			t.forget(s, head.token)
		}
	}
}

// forget drops a token's tombstone, when it expires or when the token makes a new volume.
func (t *tombstones) forget(s *State, token string) {
	if _, ok := t.byToken[token]; ok {
		delete(t.byToken, token)
		s.markDirty(kindTombstone, token)
	}
}
