// Package hydration makes a volume restored from a snapshot (or copied from a volume) read slowly until its
// blocks are fetched, as EBS does: a restored volume's blocks live in the snapshot store until they are pulled
// to the volume, and the first read of a block not pulled yet waits for it.
//
// Design: fakecloud's state models the background fetch as a sweep from the volume's first byte at a constant
// rate from its creation (state.Initialization: InitializedBytes, RateBytes). This policy asks state once per
// volume and extrapolates the sweep with its own clock, so the hot path takes no lock of state's. A read of a
// block beyond the sweep that has not been read before waits BlockLatency (the fetch), then the block is
// fetched for good; the bitmap of fetched blocks exists only until the sweep passes the end, then it is
// dropped. Blocks are EBS snapshot blocks of 512 KiB. Concurrent first reads of one block wait for one fetch.
// A write that covers whole blocks makes them fetched (their old bytes no longer matter); partial writes do
// not. A volume with fast snapshot restore is done at creation, so it never waits.
package hydration

import (
	"context"
	"sync"
	"time"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// BlockSize is EBS's snapshot block: the unit fetched on a first read.
const BlockSize = 512 << 10

// DefaultBlockLatency is what a first read of one block waits: 20 ms makes a cold sequential read at queue depth
// 1 run at about 25 MiB/s, and a cold 4 KiB random read about 50 IOPS, the order of what users report of
// uninitialized EBS volumes.
const DefaultBlockLatency = 20 * time.Millisecond

// Progress is a volume's initialization as state models it at the moment it was asked.
type Progress struct {
	// TotalBytes is how much must be fetched (the source's size); 0 when nothing must be.
	TotalBytes int64
	// InitializedBytes is how far the background sweep has come; RateBytes is its speed in bytes per second.
	InitializedBytes int64
	RateBytes        int64
}

// Lookup tells a volume's initialization now. ok is false when the volume is not known yet (the policy asks
// again at its next read).
type Lookup func(volumeID string) (p Progress, ok bool)

// Options configure the policy; zero values take the defaults.
type Options struct {
	// BlockLatency is the wait of a first read of a block beyond the sweep.
	BlockLatency time.Duration
	// Now and Sleep are the clock (tests replace them).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Policy is the fuseblock.Policy of restore hydration.
type Policy struct {
	lookup  Lookup
	latency time.Duration
	now     func() time.Time
	sleep   func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	volumes map[string]*volume
}

var (
	_ fuseblock.Policy    = (*Policy)(nil)
	_ fuseblock.Forgetter = (*Policy)(nil)
)

// New makes the policy.
func New(lookup Lookup, o Options) *Policy {
	p := &Policy{lookup: lookup, latency: o.BlockLatency, now: o.Now, sleep: o.Sleep, volumes: map[string]*volume{}}
	if p.latency <= 0 {
		p.latency = DefaultBlockLatency
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.sleep == nil {
		p.sleep = ctxsleep.Sleep
	}
	return p
}

// volume is what the policy knows of one volume.
type volume struct {
	mu sync.Mutex
	// done: every block reads at full speed; nothing else is kept.
	done bool
	// The sweep: at asked it had reached swept bytes, growing by rate per second up to total.
	total, swept, rate int64
	asked              time.Time
	// fetched marks blocks beyond the sweep that were read (or wholly written); fetching holds a channel per
	// block being fetched, closed when its fetch ends.
	fetched  []uint64
	fetching map[int64]chan struct{}
}

// Before delays first reads of blocks not fetched yet and records reads and whole-block writes.
func (p *Policy) Before(ctx context.Context, io fuseblock.IO) error {
	if io.Op != fuseblock.OpRead && io.Op != fuseblock.OpWrite || io.Len <= 0 {
		return nil
	}
	v := p.volume(io.Volume)
	if v == nil {
		return nil
	}
	if io.Op == fuseblock.OpWrite {
		v.wroteWhole(io.Off, io.Len, p.now())
		return nil
	}
	return p.read(ctx, v, io.Off, io.Len)
}

// Forget drops what the policy knows of a deleted volume (fuseblock.Forgetter), so that the records of
// restored volumes do not pile up over create and delete cycles.
func (p *Policy) Forget(volumeID string) {
	p.mu.Lock()
	delete(p.volumes, volumeID)
	p.mu.Unlock()
}

// volume returns the volume's record, asking state the first time; nil when it needs no hydration (done, or
// not known yet).
func (p *Policy) volume(id string) *volume {
	p.mu.Lock()
	v, ok := p.volumes[id]
	p.mu.Unlock()
	if ok {
		if v.isDone() {
			return nil
		}
		return v
	}
	prog, known := p.lookup(id)
	if !known {
		return nil
	}
	v = &volume{total: prog.TotalBytes, swept: prog.InitializedBytes, rate: prog.RateBytes, asked: p.now()}
	v.done = v.total <= 0 || v.swept >= v.total
	if !v.done {
		v.fetched = make([]uint64, (blocks(v.total)+63)/64)
		v.fetching = map[int64]chan struct{}{}
	}
	p.mu.Lock()
	if prev, ok := p.volumes[id]; ok { // another request asked at the same time
		v = prev
	} else {
		p.volumes[id] = v
	}
	p.mu.Unlock()
	if v.isDone() {
		return nil
	}
	return v
}

func (v *volume) isDone() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.done
}

// sweptAt is how far the background sweep has come at now; when it has passed the end, the volume is done and
// its bitmap dropped. Called with v.mu held.
func (v *volume) sweptAt(now time.Time) int64 {
	if v.done {
		return v.total
	}
	swept := v.swept
	if v.rate > 0 {
		elapsed := now.Sub(v.asked)
		secs := int64(elapsed / time.Second)
		if secs >= (v.total-swept)/v.rate+1 {
			swept = v.total
		} else {
			swept += secs*v.rate + int64(float64(v.rate)*(elapsed%time.Second).Seconds())
		}
	}
	if swept >= v.total {
		v.done, v.fetched = true, nil
		return v.total
	}
	return swept
}

func blocks(n int64) int64 { return (n + BlockSize - 1) / BlockSize }

func (v *volume) isFetched(b int64) bool { return v.fetched[b/64]&(1<<(b%64)) != 0 }
func (v *volume) markFetched(b int64)    { v.fetched[b/64] |= 1 << (b % 64) }

// read waits for the fetch of each block of [off, off+n) beyond the sweep that is not fetched yet, one block
// at a time as a queue-depth-1 reader of a cold volume does; blocks other reads are fetching are waited for.
func (p *Policy) read(ctx context.Context, v *volume, off, n int64) error {
	first, last := off/BlockSize, (off+n-1)/BlockSize
	for b := first; b <= last; b++ {
		v.mu.Lock()
		swept := v.sweptAt(p.now())
		if v.done {
			v.mu.Unlock()
			return nil
		}
		if b*BlockSize >= v.total { // beyond the source: empty, nothing to fetch
			v.mu.Unlock()
			return nil
		}
		if (b+1)*BlockSize <= swept || v.isFetched(b) {
			v.mu.Unlock()
			continue
		}
		if ch, busy := v.fetching[b]; busy {
			v.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			b-- // look again: the fetch may have been cut short
			continue
		}
		ch := make(chan struct{})
		v.fetching[b] = ch
		v.mu.Unlock()

		err := p.sleep(ctx, p.latency)
		v.mu.Lock()
		delete(v.fetching, b)
		if err == nil && !v.done {
			v.markFetched(b)
		}
		v.mu.Unlock()
		close(ch)
		if err != nil {
			return err
		}
	}
	return nil
}

// wroteWhole marks the blocks the write covers entirely as fetched.
func (v *volume) wroteWhole(off, n int64, now time.Time) {
	first, end := (off+BlockSize-1)/BlockSize, (off+n)/BlockSize
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sweptAt(now)
	for b := first; b < end && !v.done && b*BlockSize < v.total; b++ {
		v.markFetched(b)
	}
}
