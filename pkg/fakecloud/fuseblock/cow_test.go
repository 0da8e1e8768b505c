package fuseblock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The session is tested on plain files, without FUSE: writers call cowVolume.modify as the handles do.

const testChunk = 16 << 10

// cowFixture is a volume file with data and holes, a writer's handle on it, the session's read-only handle and
// an empty destination.
type cowFixture struct {
	v              cowVolume
	path           string
	rw, src, dst   *os.File
	before         []byte // the volume's bytes when the copy starts
	dataChunks     int    // chunks holding data at the start
	size           int64
	sessionOptions sessionOptions
}

// newCowFixture: 64 chunks; chunks 0-9, 20 (half), 40-47 and 63 hold data, the rest are holes.
func newCowFixture(t *testing.T) *cowFixture {
	t.Helper()
	dir := t.TempDir()
	fx := &cowFixture{path: filepath.Join(dir, "vol.img"), size: 64 * testChunk}
	var err error
	if fx.rw, err = os.OpenFile(fx.path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.rw.Close() })
	if err := fx.rw.Truncate(fx.size); err != nil {
		t.Fatal(err)
	}
	fill := func(off, n int64) {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + (off+int64(i))/4096%251)
		}
		if _, err := fx.rw.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	fill(0, 10*testChunk)
	fill(20*testChunk, testChunk/2)
	fill(40*testChunk, 8*testChunk)
	fill(63*testChunk, testChunk)
	fx.dataChunks = 10 + 1 + 8 + 1
	if fx.before, err = os.ReadFile(fx.path); err != nil {
		t.Fatal(err)
	}
	if fx.src, err = os.Open(fx.path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.src.Close() })
	if fx.dst, err = os.Create(filepath.Join(dir, "copy.img")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fx.dst.Close() })
	fx.sessionOptions = sessionOptions{chunk: testChunk, noReflink: true}
	return fx
}

func (fx *cowFixture) copy(ctx context.Context) (CopyStats, error) {
	return fx.v.copyPointInTime(ctx, fx.src, fx.dst, fx.sessionOptions)
}

// write changes n bytes at off through the gate, as a FUSE write does.
func (fx *cowFixture) write(t *testing.T, off, n int64, b byte) {
	t.Helper()
	err := fx.v.modify(off, n, func() error {
		_, err := fx.rw.WriteAt(bytes.Repeat([]byte{b}, int(n)), off)
		return err
	})
	if err != nil {
		t.Errorf("write at %d: %v", off, err)
	}
}

// punch discards n bytes at off through the gate, as the loop driver's discard does.
func (fx *cowFixture) punch(t *testing.T, off, n int64) {
	t.Helper()
	err := fx.v.modify(off, n, func() error {
		return unix.Fallocate(int(fx.rw.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	})
	if err != nil {
		t.Errorf("punch at %d: %v", off, err)
	}
}

func (fx *cowFixture) expectCopyIsBefore(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(fx.dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(fx.before) {
		t.Fatalf("copy has %d bytes, want %d", len(got), len(fx.before))
	}
	for off := 0; off < len(got); off += 4096 {
		if !bytes.Equal(got[off:off+4096], fx.before[off:off+4096]) {
			t.Fatalf("copy differs from the point in time at %d (chunk %d)", off, off/testChunk)
		}
	}
}

// allocated is the bytes the file has blocks for.
func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestCopyIdle: with nothing writing, the copy is the file, holes stay holes and only data chunks are read.
func TestCopyIdle(t *testing.T) {
	fx := newCowFixture(t)
	stats, err := fx.copy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fx.expectCopyIsBefore(t)
	if stats.Size != fx.size || stats.Chunks != int64(fx.dataChunks) || stats.WriterChunks != 0 || stats.Reflinked {
		t.Fatalf("stats = %+v, want size %d and %d chunks copied by the copier", stats, fx.size, fx.dataChunks)
	}
	if got, want := allocated(t, fx.dst), allocated(t, fx.src); got > want {
		t.Fatalf("copy allocates %d bytes, the sparse source %d", got, want)
	}
	if len(fx.v.sessions) != 0 {
		t.Fatal("session still installed after the copy")
	}
}

// TestCopyBeforeWrite holds the copier before chunk 40 while writes and a discard change chunks it has copied
// (5, and the hole half of 20), chunks it has not reached (40, 41-42 in one write, the discard of 63) and a
// hole (50): the copy is the file as it was, each chunk is copied once, by the write that changed it first
// or by the copier.
func TestCopyBeforeWrite(t *testing.T) {
	fx := newCowFixture(t)
	at40, release := make(chan struct{}), make(chan struct{})
	fx.sessionOptions.beforeChunk = func(off int64) {
		if off == 40*testChunk {
			close(at40)
			<-release
		}
	}
	type result struct {
		stats CopyStats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		s, err := fx.copy(context.Background())
		done <- result{s, err}
	}()
	<-at40
	fx.write(t, 5*testChunk+100, 10, 0xAA)               // already copied: no copy
	fx.write(t, 40*testChunk, 4096, 0xBB)                // the chunk the copier is about to take
	fx.write(t, 41*testChunk+testChunk-2048, 4096, 0xCC) // spans 41 and 42
	fx.punch(t, 63*testChunk, testChunk)                 // discard of data
	fx.write(t, 50*testChunk, 4096, 0xDD)                // into a hole
	fx.write(t, 20*testChunk+testChunk/2, 4096, 0xEE)    // the hole half of a data chunk
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	fx.expectCopyIsBefore(t)
	if r.stats.WriterChunks != 5 {
		t.Errorf("writers copied %d chunks, want 5 (40, 41, 42, 63, 50)", r.stats.WriterChunks)
	}
	if want := int64(fx.dataChunks - 4); r.stats.Chunks != want {
		t.Errorf("copier copied %d chunks, want %d (all data chunks but 40, 41, 42, 63)", r.stats.Chunks, want)
	}
	now, _ := os.ReadFile(fx.path)
	if now[40*testChunk] != 0xBB || now[50*testChunk] != 0xDD || now[63*testChunk] != 0 {
		t.Error("the writes did not reach the volume")
	}
	// After the session, writes copy nothing.
	fx.write(t, 60*testChunk, 10, 0x11)
	fx.expectCopyIsBefore(t)
}

// TestCopyClaims runs writers on random chunks against the copier: every byte range is copied at most once,
// and the copy is the point in time. Run with -race.
func TestCopyClaims(t *testing.T) {
	fx := newCowFixture(t)
	var mu sync.Mutex
	var copies [][2]int64
	fx.sessionOptions.copy = func(dst, src *os.File, off, n int64) error {
		mu.Lock()
		copies = append(copies, [2]int64{off, n})
		mu.Unlock()
		return copyData(dst, src, off, n)
	}
	started := make(chan struct{})
	var once sync.Once
	fx.sessionOptions.beforeChunk = func(int64) { once.Do(func() { close(started) }) }
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := fx.copy(ctx)
		done <- err
	}()
	<-started
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 200 {
				off := r.Int64N(fx.size - 8192)
				if r.IntN(4) == 0 {
					fx.punch(t, off&^4095, 4096)
				} else {
					fx.write(t, off, 1+r.Int64N(8192), byte(0x80+w))
				}
			}
		}()
	}
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fx.expectCopyIsBefore(t)
	sort.Slice(copies, func(i, j int) bool { return copies[i][0] < copies[j][0] })
	for i := 1; i < len(copies); i++ {
		if prev := copies[i-1]; prev[0]+prev[1] > copies[i][0] {
			t.Fatalf("bytes copied twice: [%d,+%d) and [%d,+%d)", prev[0], prev[1], copies[i][0], copies[i][1])
		}
	}
}

// TestCopyFailure: a destination error or the caller's context ends the session with an error, the volume's
// writes all succeed (before, during and after), and nothing is copied afterwards.
func TestCopyFailure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failAt  int64 // the copier's chunk at which the failure happens
		writer  bool  // a writer's copy fails rather than the copier's
		cancel  bool
		wantErr error
	}{
		{name: "destination full under the copier", failAt: 3, wantErr: syscall.ENOSPC},
		{name: "destination full under a writer", failAt: 3, writer: true, wantErr: syscall.ENOSPC},
		{name: "context cancelled", failAt: 3, cancel: true, wantErr: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newCowFixture(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			full, copiesAfter := false, 0
			fx.sessionOptions.copy = func(dst, src *os.File, off, n int64) error {
				mu.Lock()
				defer mu.Unlock()
				if full {
					copiesAfter++
					return syscall.ENOSPC
				}
				return copyData(dst, src, off, n)
			}
			fx.sessionOptions.beforeChunk = func(off int64) {
				if off != tc.failAt*testChunk {
					return
				}
				switch {
				case tc.cancel:
					cancel()
				case tc.writer:
					mu.Lock()
					full = true
					mu.Unlock()
					fx.write(t, 45*testChunk, 4096, 0x55) // its copy fails; the write does not
				default:
					mu.Lock()
					full = true
					mu.Unlock()
				}
			}
			_, err := fx.copy(ctx)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("copy: err = %v, want %v", err, tc.wantErr)
			}
			if len(fx.v.sessions) != 0 {
				t.Fatal("session still installed after a failure")
			}
			mu.Lock()
			n := copiesAfter
			mu.Unlock()
			fx.write(t, 46*testChunk, 4096, 0x66)
			mu.Lock()
			after := copiesAfter
			full = false
			mu.Unlock()
			if after != n {
				t.Fatal("a write after the failed session still copied")
			}
			if n > 1 {
				t.Fatalf("%d copies were tried after the first failure, want at most 1", n)
			}
			now, _ := os.ReadFile(fx.path)
			if now[45*testChunk] != 0x55 && tc.writer || now[46*testChunk] != 0x66 {
				t.Fatal("a write during or after the failure did not reach the volume")
			}

			// A failed session does not keep the next copy from running.
			if err := fx.dst.Truncate(0); err != nil {
				t.Fatal(err)
			}
			fx.sessionOptions.beforeChunk = nil
			fx.before = now
			if _, err := fx.copy(context.Background()); err != nil {
				t.Fatalf("next copy: %v", err)
			}
			fx.expectCopyIsBefore(t)
		})
	}
}

// TestCopiesWithTheirOwnInstants: two copies of one volume begun at different instants run side by side, and
// each holds the volume as it was when it began, whatever was written between and after.
func TestCopiesWithTheirOwnInstants(t *testing.T) {
	fx := newCowFixture(t)
	first, err := fx.v.begin(fx.src, fx.dst, fx.sessionOptions)
	if err != nil {
		t.Fatal(err)
	}
	first.ownsSrc = false
	fx.write(t, 3*testChunk, 4096, 0xa1) // after the first instant, before the second
	middle, err := os.ReadFile(fx.path)
	if err != nil {
		t.Fatal(err)
	}
	dst2, err := os.Create(fx.dst.Name() + ".2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst2.Close() })
	second, err := fx.v.begin(fx.src, dst2, fx.sessionOptions)
	if err != nil {
		t.Fatal(err)
	}
	second.ownsSrc = false
	fx.write(t, 3*testChunk, 4096, 0xb2) // after both
	fx.write(t, 41*testChunk, 8192, 0xb3)
	for _, p := range []*PointInTime{second, first} {
		if _, err := fx.v.finish(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	fx.expectCopyIsBefore(t)
	if got, err := os.ReadFile(dst2.Name()); err != nil || !bytes.Equal(got, middle) {
		t.Fatalf("second copy (err %v) is not the volume at its own instant", err)
	}
	if len(fx.v.sessions) != 0 {
		t.Fatal("sessions still installed after the copies")
	}
}

// BenchmarkCopyBeforeWrite is the cost of a 4 KiB write into a data chunk the session has not copied yet,
// against the same write with no session, on plain files (no FUSE): the write amplification the chunk size
// buys. The copier is held, so every write copies its whole chunk first.
func BenchmarkCopyBeforeWrite(b *testing.B) {
	const size = 64 << 20
	dir := b.TempDir()
	path := filepath.Join(dir, "vol.img")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0x42}, size), 0o600); err != nil {
		b.Fatal(err)
	}
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer rw.Close()
	src, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	buf := bytes.Repeat([]byte{0x17}, 4096)
	for _, chunk := range []int64{0, 128 << 10, 512 << 10, 2 << 20} {
		name := fmt.Sprintf("chunk-%dk", chunk>>10)
		if chunk == 0 {
			name = "no-session"
		}
		b.Run(name, func(b *testing.B) {
			var v cowVolume
			nChunks := int64(size / max(chunk, 4096))
			var release chan struct{}
			var done chan error
			begin := func() {
				dst, err := os.Create(filepath.Join(dir, "copy.img"))
				if err != nil {
					b.Fatal(err)
				}
				held := make(chan struct{})
				release, done = make(chan struct{}), make(chan error, 1)
				o := sessionOptions{chunk: chunk, noReflink: true, beforeChunk: func(int64) {
					select {
					case <-held:
					default:
						close(held)
						<-release
					}
				}}
				go func() {
					_, err := v.copyPointInTime(context.Background(), src, dst, o)
					done <- errors.Join(err, dst.Close())
				}()
				<-held
			}
			end := func() {
				close(release)
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			if chunk != 0 {
				begin()
			}
			b.ResetTimer()
			for i := range int64(b.N) {
				if chunk != 0 && i > 0 && i%nChunks == 0 {
					b.StopTimer()
					end()
					begin()
					b.StartTimer()
				}
				// The second 4 KiB of each chunk in turn: never the copier's held first chunk.
				off := (i%nChunks)*max(chunk, 4096) + 4096
				if err := v.modify(off, 4096, func() error { _, err := rw.WriteAt(buf, off); return err }); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if chunk != 0 {
				end()
			}
		})
	}
}
