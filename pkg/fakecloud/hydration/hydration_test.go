package hydration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock/fuseblocktest"
)

// clock is a fake clock whose sleeps count and advance nothing (a fetch costs no simulated time, so the
// sweep's position is set by the test alone).
type clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps int
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
func (c *clock) Sleep(ctx context.Context, _ time.Duration) error {
	c.mu.Lock()
	c.sleeps++
	c.mu.Unlock()
	return ctx.Err()
}
func (c *clock) taken() int { c.mu.Lock(); defer c.mu.Unlock(); n := c.sleeps; c.sleeps = 0; return n }

const mib = 1 << 20

func read(off, n int64) fuseblock.IO {
	return fuseblock.IO{Volume: "vol-r", Op: fuseblock.OpRead, Off: off, Len: n}
}
func write(off, n int64) fuseblock.IO {
	return fuseblock.IO{Volume: "vol-r", Op: fuseblock.OpWrite, Off: off, Len: n}
}

// TestFirstReads: each step is a request and the number of block fetches it waited for.
func TestFirstReads(t *testing.T) {
	type step struct {
		io      fuseblock.IO
		advance time.Duration // before the request
		fetches int
	}
	// 64 MiB source, the sweep at 8 MiB and 1 MiB/s.
	cold := Progress{TotalBytes: 64 * mib, InitializedBytes: 8 * mib, RateBytes: mib}
	for _, tc := range []struct {
		name  string
		prog  Progress
		known bool
		steps []step
	}{
		{"done volume never waits", Progress{TotalBytes: 64 * mib, InitializedBytes: 64 * mib}, true,
			[]step{{io: read(0, mib)}, {io: read(63*mib, 4096)}}},
		{"empty volume never waits", Progress{}, true, []step{{io: read(0, mib)}}},
		{"unknown volume is let through", cold, false, []step{{io: read(32*mib, 4096)}}},
		{"below the sweep is fast", cold, true, []step{{io: read(0, 8*mib)}}},
		{"a block is fetched once", cold, true, []step{
			{io: read(32*mib, 4096), fetches: 1}, {io: read(32*mib+8192, 4096)}, {io: read(32*mib, BlockSize)}}},
		{"each block of a read is fetched", cold, true, []step{{io: read(40*mib, mib+1), fetches: 3}}},
		{"the sweep catches up", cold, true, []step{
			{io: read(12*mib, 4096), advance: 3 * time.Second, fetches: 1},
			{io: read(10*mib, 4096), advance: 3 * time.Second}, // swept to 11 MiB by now
			{io: read(63*mib, 4096), advance: time.Minute}}},
		{"beyond the source is empty", cold, true, []step{{io: read(64*mib, mib)}, {io: read(63*mib, 2*mib), fetches: 2}}},
		{"whole-block writes need no fetch", cold, true, []step{
			{io: write(20*mib, BlockSize)}, {io: read(20*mib, BlockSize)},
			{io: write(30*mib, 4096)}, {io: read(30*mib, 4096), fetches: 1},
			{io: write(40*mib+4096, BlockSize)}, {io: read(40*mib, 2*BlockSize), fetches: 2}}},
		{"fsync is let through", cold, true, []step{{io: fuseblock.IO{Volume: "vol-r", Op: fuseblock.OpFsync}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{now: time.Unix(1e9, 0)}
			asked := 0
			p := New(func(string) (Progress, bool) { asked++; return tc.prog, tc.known }, Options{Now: c.Now, Sleep: c.Sleep})
			for i, s := range tc.steps {
				c.advance(s.advance)
				if err := p.Before(context.Background(), s.io); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := c.taken(); got != s.fetches {
					t.Errorf("step %d (%+v): %d fetches, want %d", i, s.io, got, s.fetches)
				}
			}
			if !tc.known && asked != len(tc.steps) {
				t.Errorf("asked state %d times for an unknown volume, want every time (%d)", asked, len(tc.steps))
			}
			if tc.known && asked != 1 && tc.steps[0].io.Op != fuseblock.OpFsync {
				t.Errorf("asked state %d times, want once", asked)
			}
		})
	}
}

// TestSweepDropsTheBitmap: once the sweep passes the end, nothing per block is kept.
func TestSweepDropsTheBitmap(t *testing.T) {
	c := &clock{now: time.Unix(1e9, 0)}
	p := New(func(string) (Progress, bool) { return Progress{TotalBytes: 4 * mib, RateBytes: mib}, true },
		Options{Now: c.Now, Sleep: c.Sleep})
	_ = p.Before(context.Background(), read(3*mib, 4096))
	c.advance(5 * time.Second)
	_ = p.Before(context.Background(), read(3*mib+BlockSize, 4096))
	v := p.volumes["vol-r"]
	if !v.done || v.fetched != nil {
		t.Fatalf("after the sweep: done=%v, bitmap of %d words", v.done, len(v.fetched))
	}
	if n := c.taken(); n != 1 {
		t.Fatalf("%d fetches, want the one before the sweep ended", n)
	}
}

// TestConcurrentFirstReads: readers of one cold block wait for a single fetch; a fetch cut short by the
// filesystem closing fetches nothing.
func TestConcurrentFirstReads(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	fetches := 0
	sleep := func(ctx context.Context, _ time.Duration) error {
		mu.Lock()
		fetches++
		mu.Unlock()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p := New(func(string) (Progress, bool) { return Progress{TotalBytes: 64 * mib, RateBytes: 1}, true },
		Options{Sleep: sleep})

	ctx, cancel := context.WithCancel(context.Background())
	cut := make(chan error)
	go func() { cut <- p.Before(ctx, read(5*mib, 4096)) }()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return fetches == 1 })
	cancel()
	if err := <-cut; !errors.Is(err, context.Canceled) {
		t.Fatalf("cut fetch: %v, want context.Canceled", err)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Before(context.Background(), read(5*mib+8192, 4096)); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return fetches == 2 })
	close(release)
	wg.Wait()
	if fetches != 2 {
		t.Fatalf("%d fetches, want the cut one and one for all eight readers", fetches)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached")
}

// TestDeletedVolumesForgotten: restored volumes created, read and deleted one after another through a real
// mount leave no record behind, as the fuse backend's deletion tells the policy (fuseblock's Forget).
func TestDeletedVolumesForgotten(t *testing.T) {
	clk := &clock{now: time.Unix(0, 0)}
	cold := Progress{TotalBytes: 4 * mib, RateBytes: 1}
	p := New(func(string) (Progress, bool) { return cold, true }, Options{Now: clk.Now, Sleep: clk.Sleep})
	m := fuseblocktest.Serve(t, fuseblock.Chain(fuseblock.NopPolicy{}, p))
	for i := range 50 {
		id := fmt.Sprintf("vol-%d", i)
		m.Create(id, cold.TotalBytes)
		m.Read(id, 0, 4096)
		m.Delete(id)
	}
	if clk.taken() == 0 {
		t.Fatal("no read waited for a fetch: the policy did not see the volumes")
	}
	p.mu.Lock()
	n := len(p.volumes)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("the policy still holds %d records after every volume was deleted", n)
	}
}
