// Package state is fakecloud's model of an EC2 region's EBS: volumes, attachments, modifications, snapshots,
// instances and zones, the rules EC2 enforces on them, the timed transitions between their states, and their
// persistence. The API layer only translates the wire to calls here; the block backend only does what this
// package decides.
package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/store"
)

// Clock tells the time; tests inject their own.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Options are the collaborators of a State.
type Options struct {
	Backend blockdev.Backend
	Store   *store.Store
	Clock   Clock
	// Stuck reports transitions that fault injection holds still; nil holds none.
	Stuck func(transition string) bool
	// HoldNext takes one hold of a single transition starting now (a counted stuck fault): an attachment it
	// takes stays attaching until it is detached. nil holds none.
	HoldNext func(transition string) bool
}

// Record kinds in the store.
const (
	kindVolume       = "volumes"
	kindSnapshot     = "snapshots"
	kindModification = "modifications"
	kindInstance     = "instances"
	kindTombstone    = "tombstones"
)

// stuckPoll is how often held or busy transitions are tried again, so that lifting a fault resumes them.
const stuckPoll = 100 * time.Millisecond

// State holds the whole cloud behind one mutex. Every public method takes it, advances due transitions, and
// commits what changed before returning, so a reply is only sent for state that is durable.
type State struct {
	mu      sync.Mutex
	cfg     Config
	backend blockdev.Backend
	store   *store.Store
	clock   Clock
	stuck   func(string) bool
	hold    func(string) bool

	volumes       map[string]*Volume
	volumeIDs     idIndex
	snapshots     map[string]*Snapshot
	snapshotIDs   idIndex
	modifications map[string]*Modification
	instances     map[string]*Instance
	instanceIDs   idIndex
	// fastRestores are fast snapshot restores by fsrKey, listed in fastRestoreIDs' order.
	fastRestores   map[string]*FastSnapshotRestore
	fastRestoreIDs idIndex
	tokens         map[string]string // ClientToken → volume ID
	tombstones     tombstones        // ClientTokens of deleted volumes (tokens.go)
	// ebs are the account's EBS encryption settings (encryption.go).
	ebs EBSSettings
	// uncopied counts, per volume, its pending snapshots whose copy is not done; the volume waits for them.
	uncopied map[string]int

	// Work whose block I/O runs outside the lock: IDs whose files are being made by CreateVolume (no record
	// yet), ClientTokens of creations in flight (a retry waits for the first), and volumes being copied into a
	// new volume (their transitions wait, since the backend serialises per volume).
	reserved       map[string]struct{}
	tokensInFlight map[string]chan struct{}
	copying        map[string]int
	// launches are the ClientTokens of RunInstances requests making their volumes' files (a retry waits).
	launches map[string]chan struct{}
	// Block I/O jobs (iojobs.go): scheduled under the lock, started once committed. ioBusy holds their volumes
	// until the outcome is applied; copies cancels the snapshot copies in flight; slots bounds the workers;
	// jobsCtx ends with Close.
	jobs   []ioJob
	ioBusy map[string]struct{}
	copies map[string]context.CancelFunc
	// failures counts each job's failures in a row, which space its retries (iojobs.go).
	failures   map[retryKey]int
	slots      chan struct{}
	workers    sync.WaitGroup
	jobsCtx    context.Context
	cancelJobs context.CancelFunc

	pending map[pendingKey]struct{}
	dirty   map[pendingKey]struct{}
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type pendingKey struct {
	kind string
	id   string
}

// New loads the state from the store (if any), registers configured instances, re-binds attached volumes and
// starts the transition loop. Call Close to stop it.
func New(cfg Config, opts Options) (*State, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if opts.Backend == nil || opts.Store == nil {
		return nil, fmt.Errorf("state needs a backend and a store")
	}
	s := &State{
		cfg:            cfg,
		backend:        opts.Backend,
		store:          opts.Store,
		clock:          opts.Clock,
		stuck:          opts.Stuck,
		hold:           opts.HoldNext,
		volumes:        map[string]*Volume{},
		snapshots:      map[string]*Snapshot{},
		modifications:  map[string]*Modification{},
		instances:      map[string]*Instance{},
		fastRestores:   map[string]*FastSnapshotRestore{},
		tokens:         map[string]string{},
		tombstones:     newTombstones(),
		uncopied:       map[string]int{},
		reserved:       map[string]struct{}{},
		tokensInFlight: map[string]chan struct{}{},
		launches:       map[string]chan struct{}{},
		copying:        map[string]int{},
		ioBusy:         map[string]struct{}{},
		copies:         map[string]context.CancelFunc{},
		failures:       map[retryKey]int{},
		slots:          make(chan struct{}, ioWorkers),
		pending:        map[pendingKey]struct{}{},
		dirty:          map[pendingKey]struct{}{},
		kick:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		done:           make(chan struct{}),
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.stuck == nil {
		s.stuck = func(string) bool { return false }
	}
	if s.hold == nil {
		s.hold = func(string) bool { return false }
	}
	s.jobsCtx, s.cancelJobs = context.WithCancel(context.Background())
	if err := s.load(); err != nil {
		return nil, err
	}
	s.failLostCaptures()
	for _, spec := range cfg.Instances {
		if _, ok := s.instances[spec.ID]; !ok {
			s.putInstance(spec)
		}
	}
	if err := s.reconcile(context.Background()); err != nil {
		return nil, err
	}
	// No copy is in flight yet: the temporary files of copies a crash cut short are garbage.
	if err := s.backend.RemoveTemporaryFiles(); err != nil {
		klog.ErrorS(err, "Removing temporary files of interrupted copies failed")
	}
	s.removeOrphans()
	if err := s.flush(); err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

// Close stops the transition loop and the block I/O jobs; the outcome of a job cut short is not recorded, so the
// next start replays it. Devices stay bound; a new State on the same store picks them up.
func (s *State) Close() {
	close(s.stop)
	<-s.done
	s.cancelJobs()
	s.workers.Wait()
}

func (s *State) load() error {
	loaders := []struct {
		kind string
		fn   func(id string, raw []byte) error
	}{
		{kindVolume, func(id string, raw []byte) error {
			v := &Volume{}
			if err := json.Unmarshal(raw, v); err != nil {
				return err
			}
			s.volumes[id] = v
			s.volumeIDs.insert(id)
			if v.ClientToken != "" {
				s.tokens[v.ClientToken] = id
			}
			s.markPending(kindVolume, id)
			return nil
		}},
		{kindSnapshot, func(id string, raw []byte) error {
			sn := &Snapshot{}
			if err := json.Unmarshal(raw, sn); err != nil {
				return err
			}
			s.snapshots[id] = sn
			s.snapshotIDs.insert(id)
			if sn.Copying {
				s.uncopied[sn.VolumeID]++
			}
			s.markPending(kindSnapshot, id)
			return nil
		}},
		{kindModification, func(id string, raw []byte) error {
			m := &Modification{}
			if err := json.Unmarshal(raw, m); err != nil {
				return err
			}
			s.modifications[id] = m
			s.markPending(kindModification, id)
			return nil
		}},
		{kindInstance, func(id string, raw []byte) error {
			in := &Instance{}
			if err := json.Unmarshal(raw, in); err != nil {
				return err
			}
			if in.State == "" {
				in.State = InstanceRunning
			}
			s.instances[id] = in
			s.instanceIDs.insert(id)
			s.markPending(kindInstance, id)
			return nil
		}},
		{kindFastRestore, func(key string, raw []byte) error {
			f := &FastSnapshotRestore{}
			if err := json.Unmarshal(raw, f); err != nil {
				return err
			}
			s.fastRestores[key] = f
			s.fastRestoreIDs.insert(key)
			s.markPending(kindFastRestore, key)
			return nil
		}},
		{kindSettings, s.loadSettings},
		{kindTombstone, func(token string, raw []byte) error {
			tb := &Tombstone{}
			if err := json.Unmarshal(raw, tb); err != nil {
				return err
			}
			s.tombstones.add(token, tb)
			return nil
		}},
	}
	for _, l := range loaders {
		if err := s.store.ForEach(l.kind, l.fn); err != nil {
			return fmt.Errorf("load %s: %w", l.kind, err)
		}
	}
	return nil
}

// failLostCaptures, at start, fails the snapshots whose point in time only a copy-on-write session of the last
// run held: copying again now would take a later instant. (A failed commit's reload keeps them: the sessions
// of this run are alive.)
func (s *State) failLostCaptures() {
	for id, sn := range s.snapshots {
		if !sn.Copying || sn.Capture != string(blockdev.CaptureSession) {
			continue
		}
		klog.InfoS("Snapshot's point in time was lost with the last run; the snapshot fails", "snapshotID", id, "volumeID", sn.VolumeID)
		sn.State, sn.StatusMessage = SnapshotError, lostInstant
		s.setCopied(sn)
		s.markDirty(kindSnapshot, id)
	}
}

// reconcile gives every volume that holds a device after a restart its device again and releases the devices
// of volumes that are gone. A volume on its way out (every attachment holding its device is detaching) keeps
// the device it still has, for the replayed detach to release as it would have (busy while mounted), but is
// not bound again when the release already happened and only its commit was lost.
func (s *State) reconcile(ctx context.Context) error {
	// bound maps each volume that keeps a device to the one it had: consumers reopen that path, so the backend
	// binds the volume there again.
	bound := map[string]string{}
	for id, v := range s.volumes {
		hostDevice, leaving := "", true
		for _, a := range v.Attachments {
			if a.HostDevice != "" {
				hostDevice = a.HostDevice
				leaving = leaving && (a.State == AttachDetaching || a.State == AttachBusy)
			}
		}
		if hostDevice != "" && (!leaving || s.backend.DevicePath(id) != "") {
			bound[id] = hostDevice
		}
	}
	if err := s.backend.Reconcile(ctx, bound); err != nil {
		return fmt.Errorf("reconcile block devices: %w", err)
	}
	for id := range bound {
		dev := s.backend.DevicePath(id)
		v := s.volumes[id]
		for i := range v.Attachments {
			if v.Attachments[i].HostDevice != "" && v.Attachments[i].HostDevice != dev {
				v.Attachments[i].HostDevice = dev
				s.markDirty(kindVolume, id)
			}
		}
	}
	klog.InfoS("State loaded", "volumes", len(s.volumes), "snapshots", len(s.snapshots), "instances", len(s.instances), "boundDevices", len(bound))
	return nil
}

func (s *State) markDirty(kind, id string) { s.dirty[pendingKey{kind, id}] = struct{}{} }

func (s *State) markPending(kind, id string) {
	s.pending[pendingKey{kind, id}] = struct{}{}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flush commits every dirty record in one transaction.
func (s *State) flush() error {
	if len(s.dirty) == 0 {
		return nil
	}
	changes := make([]store.Change, 0, len(s.dirty))
	for k := range s.dirty {
		var rec any
		switch k.kind {
		case kindVolume:
			if v, ok := s.volumes[k.id]; ok {
				rec = v
			}
		case kindSnapshot:
			if v, ok := s.snapshots[k.id]; ok {
				rec = v
			}
		case kindModification:
			if v, ok := s.modifications[k.id]; ok {
				rec = v
			}
		case kindInstance:
			if v, ok := s.instances[k.id]; ok {
				rec = v
			}
		case kindFastRestore:
			if v, ok := s.fastRestores[k.id]; ok {
				rec = v
			}
		case kindTombstone:
			if v, ok := s.tombstones.byToken[k.id]; ok {
				rec = v
			}
		case kindSettings:
			rec = s.ebs
		}
		c := store.Change{Kind: k.kind, ID: k.id}
		if rec != nil {
			raw, err := json.Marshal(rec)
			if err != nil {
				return fmt.Errorf("encode %s/%s: %w", k.kind, k.id, err)
			}
			c.Value = raw
		}
		changes = append(changes, c)
	}
	clear(s.dirty)
	if err := s.store.Commit(changes); err != nil {
		return fmt.Errorf("persist state: %w", err)
	}
	return nil
}

// mutate runs fn under the lock after advancing due transitions, then commits. A failed commit is answered as
// EC2 would answer the failure behind it (a full disk is a capacity error, anything else an internal error):
// the client must not be told of a change that would not survive a restart.
func (s *State) mutate(fn func(now time.Time) error) error {
	var fnErr error
	if err := s.step(func(now time.Time) { fnErr = fn(now) }); err != nil {
		return storageError(err, 0)
	}
	return fnErr
}

// step advances due transitions, runs fn, advances again (so that work fn made due, as with a zero duration,
// starts now rather than on the loop's next turn), and commits, all under the lock; then it starts the block
// I/O jobs scheduled meanwhile on workers, without waiting for them. It returns the commit's error.
func (s *State) step(fn func(now time.Time)) error {
	s.mu.Lock()
	now := s.clock.Now()
	s.tombstones.expire(s, now)
	s.advance(now)
	if fn != nil {
		fn(now)
		s.advance(now)
	}
	err := s.commit()
	jobs := s.takeJobs()
	s.mu.Unlock()
	s.start(jobs)
	return err
}

// commit flushes the dirty records; when that fails, memory goes back to what the store holds, so nothing is
// kept (and no reply is sent) for a change that is not durable, and files made for it are removed.
func (s *State) commit() error {
	err := s.flush()
	if err == nil {
		return nil
	}
	klog.ErrorS(err, "Persisting state failed; undoing the uncommitted changes")
	if rerr := s.reload(); rerr != nil {
		klog.ErrorS(rerr, "Reloading state after a failed commit failed")
	}
	return err
}

// reload replaces the in-memory model with the store's records and removes files no record names.
func (s *State) reload() error {
	s.volumes, s.snapshots = map[string]*Volume{}, map[string]*Snapshot{}
	s.modifications, s.instances = map[string]*Modification{}, map[string]*Instance{}
	s.tokens, s.tombstones, s.uncopied = map[string]string{}, newTombstones(), map[string]int{}
	s.volumeIDs, s.snapshotIDs, s.instanceIDs = idIndex{}, idIndex{}, idIndex{}
	s.fastRestores, s.fastRestoreIDs = map[string]*FastSnapshotRestore{}, idIndex{}
	s.ebs = EBSSettings{}
	clear(s.pending)
	clear(s.dirty)
	s.dropJobs()
	if err := s.load(); err != nil {
		return err
	}
	s.removeOrphans()
	return nil
}

// removeOrphans deletes volume and snapshot files that no record names and no operation in flight is making:
// left by a crash between a file's creation and its commit, or by a commit that failed.
func (s *State) removeOrphans() {
	ctx, cancel := backendCtx()
	defer cancel()
	kinds := []struct {
		kind   string
		list   func() ([]string, error)
		known  func(id string) bool
		remove func(ctx context.Context, id string) error
	}{
		{kindVolume, s.backend.VolumeIDs, func(id string) bool { _, ok := s.volumes[id]; return ok }, s.backend.DeleteVolume},
		{kindSnapshot, s.backend.SnapshotIDs, func(id string) bool { _, ok := s.snapshots[id]; return ok }, s.backend.DeleteSnapshot},
	}
	for _, k := range kinds {
		ids, err := k.list()
		if err != nil {
			klog.ErrorS(err, "Listing files failed", "kind", k.kind)
		}
		for _, id := range ids {
			if _, inFlight := s.reserved[id]; inFlight || k.known(id) {
				continue
			}
			klog.InfoS("Removing a file without a record", "kind", k.kind, "id", id)
			if err := k.remove(ctx, id); err != nil {
				klog.ErrorS(err, "Removing a file without a record failed", "kind", k.kind, "id", id)
			}
		}
	}
}

// withLock runs fn under the lock, for bookkeeping that changes no record.
func (s *State) withLock(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// unreserve ends the reservation of an ID whose file was being made, and wakes requests waiting on its token.
func (s *State) unreserve(id, token string) {
	delete(s.reserved, id)
	if w, ok := s.tokensInFlight[token]; ok && token != "" {
		close(w)
		delete(s.tokensInFlight, token)
	}
}

// read runs fn under the lock after advancing due transitions.
func (s *State) read(fn func(now time.Time)) { _ = s.step(fn) }

// run advances transitions when they fall due.
func (s *State) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var wait time.Duration
		_ = s.step(func(now time.Time) { wait = s.nextWake(now) })
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// nextWake is the time until the earliest pending transition, polling held ones.
func (s *State) nextWake(now time.Time) time.Duration {
	wait := time.Hour
	for k := range s.pending {
		due, held := s.dueOf(k)
		d := due.Sub(now)
		// Held, or due yet unsettled (a busy device, a backend call to retry): look again soon.
		if held || d <= 0 {
			d = stuckPoll
		}
		wait = min(wait, max(d, time.Millisecond))
	}
	return wait
}

// newID makes an EC2-style ID: a prefix and 17 hex digits.
func newID(prefix string) string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)[:17]
}

// ioCtx bounds block I/O run outside the state lock by an API call: a volume's file made by CreateVolume,
// which for a restore or a copy may take minutes.
func ioCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), ioTimeout)
}

// ctx for backend calls made under the state lock: they are short and must finish to keep state consistent.
func backendCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
