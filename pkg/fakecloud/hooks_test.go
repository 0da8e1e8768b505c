package fakecloud_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
)

// gate holds back one kind of backend call until opened, and tells when a call has arrived.
type gate struct {
	arrived chan string // the volume or snapshot ID of each call held
	open    chan struct{}
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{arrived: make(chan string, 100), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// hold blocks a call until the gate opens or ctx ends (fakecloud closing, as a crash would cut it short).
func (g *gate) hold(ctx context.Context, id string) error {
	g.arrived <- id
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// await waits for a call to arrive at the gate and returns its ID.
func (g *gate) await(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.arrived:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no backend call arrived at the gate")
		return ""
	}
}

// hookedBackend lets a test hold back snapshot copies, deletions and detaches (before or after their I/O), and
// records what Reconcile was asked to keep bound.
type hookedBackend struct {
	blockdev.Backend
	copies, deletes *gate // held before the I/O
	detached        *gate // held after the device was released, before fakecloud can commit it

	mu         sync.Mutex
	reconciled []string
}

func (b *hookedBackend) CreateSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if b.copies != nil {
		if err := b.copies.hold(ctx, snapshotID); err != nil {
			return err
		}
	}
	return b.Backend.CreateSnapshot(ctx, snapshotID, volumeID)
}

func (b *hookedBackend) DeleteVolume(ctx context.Context, volumeID string) error {
	if b.deletes != nil {
		if err := b.deletes.hold(ctx, volumeID); err != nil {
			return err
		}
	}
	return b.Backend.DeleteVolume(ctx, volumeID)
}

func (b *hookedBackend) Detach(ctx context.Context, volumeID string, force bool) error {
	if err := b.Backend.Detach(ctx, volumeID, force); err != nil || b.detached == nil {
		return err
	}
	return b.detached.hold(ctx, volumeID)
}

func (b *hookedBackend) Reconcile(ctx context.Context, attached map[string]string) error {
	b.mu.Lock()
	b.reconciled = slices.AppendSeq(b.reconciled, maps.Keys(attached))
	b.mu.Unlock()
	return b.Backend.Reconcile(ctx, attached)
}

func (b *hookedBackend) boundAtStart(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.reconciled, id)
}

// wrap installs b around fakecloud's backend.
func (b *hookedBackend) wrap(inner blockdev.Backend) blockdev.Backend {
	b.Backend = inner
	return b
}
