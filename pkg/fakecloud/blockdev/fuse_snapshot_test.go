package blockdev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
)

// The counter layout: slot s is 4 KiB at s*counterStride, all of it the little-endian uint64 counter value
// of the write that last wrote it, or zero before any did. Between slots the volume is full of filler data, so
// a copy has a few hundred MiB to read and takes long enough for the writer to go round many times.
const (
	counterSlot   = 4096
	counterSlots  = 1024
	counterStride = 256 << 10
	counterVolume = counterSlots*counterStride + 64<<20
)

// counterWriter writes 1, 2, 3, ... through the device with O_DIRECT, write c into slot (c-1) mod
// counterSlots: sequential sweeps, one write in flight. Written is the last write that returned.
type counterWriter struct {
	written atomic.Uint64
	stop    context.CancelFunc
	done    chan struct{}
	err     error // set before done closes
}

// finish stops the writer and returns its error.
func (w *counterWriter) finish() error {
	w.stop()
	<-w.done
	return w.err
}

func startCounterWriter(t *testing.T, dev string) *counterWriter {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &counterWriter{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer f.Close()
		buf := testutil.AlignedBuf(counterSlot)
		for c := uint64(1); ctx.Err() == nil; c++ {
			for i := 0; i < counterSlot; i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], c)
			}
			if _, err := f.WriteAt(buf, int64((c-1)%counterSlots)*counterStride); err != nil {
				w.err = fmt.Errorf("write %d: %w", c, err)
				return
			}
			w.written.Store(c)
		}
	}()
	t.Cleanup(func() { _ = w.finish() })
	return w
}

// waitFor waits until n writes have returned.
func (w *counterWriter) waitFor(t *testing.T, n uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for w.written.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the writer made %d writes, waiting for %d", w.written.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fillCounterVolume writes the filler between the slots of the volume's file; the slots stay zero.
func fillCounterVolume(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{0x5A}, counterStride)
	clear(buf[:counterSlot])
	for s := range counterSlots {
		if _, err := f.WriteAt(buf, int64(s)*counterStride); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// counterInstant checks that the file at path holds the device as it was at one instant of the writer and
// returns that instant: the number of writes W it holds. After W writes, with k = W / N full sweeps and
// j = W mod N, slot s < j holds the sweep-k write k*N+s+1 and slot s >= j the sweep-(k-1) write (k-1)*N+s+1,
// or 0 when k = 0; when j = 0 every slot holds sweep k-1. W is the largest value in any slot. Every slot must
// also hold one value throughout (no torn write).
func counterInstant(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	vals := make([]uint64, counterSlots)
	buf := make([]byte, counterSlot)
	for s := range vals {
		if _, err := f.ReadAt(buf, int64(s)*counterStride); err != nil {
			return 0, fmt.Errorf("read slot %d: %w", s, err)
		}
		vals[s] = binary.LittleEndian.Uint64(buf)
		for i := 8; i < counterSlot; i += 8 {
			if v := binary.LittleEndian.Uint64(buf[i:]); v != vals[s] {
				return 0, fmt.Errorf("slot %d is torn: %d at byte 0, %d at byte %d", s, vals[s], v, i)
			}
		}
	}
	w := uint64(0)
	for _, v := range vals {
		w = max(w, v)
	}
	const n = counterSlots
	k, j := w/n, w%n
	var stale int
	firstBad := -1
	for s, v := range vals {
		want := uint64(0)
		switch {
		case uint64(s) < j:
			want = k*n + uint64(s) + 1
		case k > 0:
			want = (k-1)*n + uint64(s) + 1
		}
		if v != want {
			stale++
			if firstBad < 0 {
				firstBad = s
			}
		}
	}
	if stale > 0 {
		return w, fmt.Errorf("not one instant: the newest write is %d (sweep %d, break at slot %d), yet %d slots "+
			"disagree, first slot %d with %d", w, k, j, stale, firstBad, vals[firstBad])
	}
	return w, nil
}

// TestFusePointInTimeCopies writes a counter through an attached volume's device without pause and takes a
// snapshot and a clone meanwhile: each must hold the device at one instant between the call's start and
// end. The volume's data directory is the test's temporary directory; on a filesystem without reflink (ext4,
// tmpfs) the file copy of LoopBackend is logged for comparison: it is not point-in-time.
func TestFusePointInTimeCopies(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := newFuseBackendT(t, dir, nil)
	logFilesystem(t, dir)
	if err := b.CreateVolume(ctx, "vol-a", counterVolume); err != nil {
		t.Fatal(err)
	}
	fillCounterVolume(t, b.VolumeFile("vol-a"))
	dev, err := b.Attach(ctx, "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	w := startCounterWriter(t, dev)
	w.waitFor(t, 2*counterSlots)

	for _, tc := range []struct {
		name string
		copy func() (string, error)
	}{
		{"snapshot", func() (string, error) {
			return b.store.snapshotFile("snap-a"), b.CreateSnapshot(ctx, "snap-a", "vol-a")
		}},
		{"clone", func() (string, error) {
			return b.VolumeFile("vol-c"), b.CopyVolume(ctx, "vol-c", "vol-a", counterVolume+64<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := w.written.Load()
			start := time.Now()
			path, err := tc.copy()
			took := time.Since(start)
			after := w.written.Load()
			if err != nil {
				t.Fatal(err)
			}
			at, err := counterInstant(path)
			if err != nil {
				t.Fatalf("%s (%d writes returned during the copy): %v", tc.name, after-before, err)
			}
			// One more write than returned can be in: it reached the server before its writer saw it return.
			if at < before || at > after+1 {
				t.Fatalf("the copy holds write %d, outside the call's writes %d..%d", at, before, after+1)
			}
			t.Logf("%s in %v holds write %d; the writer made %d writes during the copy", tc.name, took, at, after-before)
		})
	}
	if got := fileSize(t, b.VolumeFile("vol-c")); got != counterVolume+64<<20 {
		t.Errorf("clone has %d bytes, want %d", got, counterVolume+64<<20)
	}

	t.Run("file copy for comparison", func(t *testing.T) {
		// LoopBackend's path: flush, then copy the file while the writer goes on.
		before := w.written.Load()
		if err := b.LoopBackend.CreateSnapshot(ctx, "snap-file", "vol-a"); err != nil {
			t.Fatal(err)
		}
		after := w.written.Load()
		if _, err := counterInstant(b.store.snapshotFile("snap-file")); err != nil {
			t.Logf("file copy is not point-in-time (%d writes during it): %v", after-before, err)
		} else {
			t.Logf("file copy happened to be point-in-time (%d writes during it; reflink, or too few writes)", after-before)
		}
	})

	if err := w.finish(); err != nil {
		t.Fatalf("the writer failed: %v", err)
	}
}

// logFilesystem says what the data directory is on and whether it reflinks, which decides how a copy is made.
func logFilesystem(t testing.TB, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	a, err := os.CreateTemp(dir, ".probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(a.Name())
	defer a.Close()
	c, err := os.CreateTemp(dir, ".probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(c.Name())
	defer c.Close()
	reflink := unix.IoctlFileClone(int(c.Fd()), int(a.Fd())) == nil
	t.Logf("data directory on filesystem type %#x, reflink %v", st.Type, reflink)
}

// BenchmarkFusePointInTimeCopy snapshots an attached 1 GiB volume holding 256 MiB of data (1 MiB extents
// every 4 MiB) through the fuse backend, idle and under a writer of 4 KiB random O_DIRECT writes, and the file
// copy of LoopBackend for comparison. It reports the writer's writes per second during the snapshot and in
// an equal time just before it without one.
func BenchmarkFusePointInTimeCopy(b *testing.B) {
	const (
		gib    = 1 << 30
		extent = 1 << 20
		every  = 4 << 20
	)
	ctx := context.Background()
	dir := b.TempDir()
	be := newFuseBackendT(b, dir, nil)
	logFilesystem(b, dir)
	if err := be.CreateVolume(ctx, "vol-b", gib); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(be.VolumeFile("vol-b"), os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte{0x77}, extent)
	for off := int64(0); off < gib; off += every {
		if _, err := f.WriteAt(data, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		b.Fatal(err)
	}
	dev, err := be.Attach(ctx, "vol-b")
	if err != nil {
		b.Fatal(err)
	}

	for _, bc := range []struct {
		name   string
		writer bool
		copy   func(id string) error
	}{
		{"cow/idle", false, func(id string) error { return be.CreateSnapshot(ctx, id, "vol-b") }},
		{"cow/rand-write-4k", true, func(id string) error { return be.CreateSnapshot(ctx, id, "vol-b") }},
		{"filecopy/idle", false, func(id string) error { return be.LoopBackend.CreateSnapshot(ctx, id, "vol-b") }},
		{"filecopy/rand-write-4k", true, func(id string) error { return be.LoopBackend.CreateSnapshot(ctx, id, "vol-b") }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var writes atomic.Int64
			stop := func() {}
			if bc.writer {
				stop = startRandomWriter(b, dev, gib, &writes)
			}
			defer stop()
			var during, without, secs float64
			for i := range b.N {
				id := fmt.Sprintf("snap-%d", i)
				b.StopTimer()
				// The baseline: the writer alone for as long as the last copy took (1 s the first time).
				win := 1.0
				if i > 0 {
					win = secs / float64(i)
				}
				w0, t0 := writes.Load(), time.Now()
				time.Sleep(time.Duration(win * float64(time.Second)))
				without += float64(writes.Load()-w0) / time.Since(t0).Seconds()
				b.StartTimer()

				w0, t0 = writes.Load(), time.Now()
				if err := bc.copy(id); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0).Seconds()
				secs += d
				during += float64(writes.Load()-w0) / d

				b.StopTimer()
				if err := be.DeleteSnapshot(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			if bc.writer {
				b.ReportMetric(during/float64(b.N), "writes/s-during")
				b.ReportMetric(without/float64(b.N), "writes/s-without")
			}
		})
	}
}

// startRandomWriter writes 4 KiB blocks at random offsets of dev with O_DIRECT, one at a time, counting them,
// until the returned stop is called.
func startRandomWriter(b *testing.B, dev string, size int64, writes *atomic.Int64) (stop func()) {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer f.Close()
		buf := testutil.AlignedBuf(4096)
		r := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			buf[0]++
			if _, err := f.WriteAt(buf, r.Int64N(size/4096)*4096); err != nil {
				b.Error(err)
				return
			}
			writes.Add(1)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
