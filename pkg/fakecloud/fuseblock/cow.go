package fuseblock

// Point-in-time copies of a volume that is being written, by copy-on-write in the server.
//
// A copy of the real file taken while the guest writes is a blend of many instants: the copier reads chunk 7
// before a write lands and chunk 3 after the next one. Reflink is atomic, but only some filesystems have it.
// Every write to a served volume passes through this server, though, so the server can keep the old bytes
// itself: a copy session per volume.
//
//   - Barrier. Writes and fallocates (discard, write-zeroes) hold the read side of the volume's gate for their
//     copy-before-write and the write itself. Starting a session takes the write side: in-flight writes finish,
//     new ones wait, the real file is fsynced (so SEEK_DATA sees every extent written so far), the size is
//     recorded and the session installed. That instant is the copy's point in time. If the destination can be
//     reflinked to the source, the reflink is made right there under the barrier and no session is needed.
//     BeginPointInTime is the barrier alone, so a caller can fix the instant (before answering a request) and
//     run the copier later (PointInTime.Finish); until then writes keep the old bytes by copy-before-write.
//   - Several sessions. A volume may have several sessions at once, each with its own instant, destination and
//     claims; a write preserves its chunks in every one, in the order they were begun.
//   - Copy-before-write. While a session runs, a write touching a chunk not yet copied first copies that
//     chunk's bytes (still those of the point in time) to the destination, then writes. The policy is asked
//     before the gate is entered, so a request a policy holds (latency, a hang) never holds up a barrier.
//   - Background copier. It walks the file in order, jumping over holes with SEEK_DATA, and copies each chunk
//     not yet copied. Within a chunk only data extents are copied (SEEK_DATA/SEEK_HOLE), so holes stay holes in
//     the destination, which starts as a sparse file of the recorded size.
//   - Claims. A chunk is todo, busy (one goroutine copies it; others touching it wait for its channel) or done.
//     The writer and the copier never both copy a chunk, and nobody writes a chunk before it is done. Nobody
//     waits while holding a claim, so waits cannot form a cycle. The copier skips holes without claiming them:
//     a chunk that is a hole when the copier looks is either untouched since the point in time (a hole then,
//     nothing to copy) or was claimed by the write that changed it.
//   - End. The copier's pass done, the gate's write side is taken once more: no write is inside a
//     copy-before-write, the session is removed, and the destination is fsynced. Abort removes a session the
//     same way without copying the rest.
//   - Failure. A destination error (ENOSPC, EIO) or the caller's context ending fails the session: the copier
//     stops, later writes stop copying, and the caller gets the error and removes its file. A volume's write
//     never fails because a copy did.
//
// Chunk size: 512 KiB, the block size of EBS snapshots (and of their direct APIs). A chunk is the cost of the
// first write into it during a session: smaller chunks waste less copying for scattered 4 KiB writes, larger
// ones cost fewer claims and syscalls for the copier. The kernel sends writes of up to 1 MiB (maxIO), so a
// large sequential write claims two or three chunks; a 4 KiB random write copies 512 KiB once per chunk.
//
// The size cannot change during a session: the server refuses size changes (Setattr), and fakecloud's state
// holds a volume's growth until its snapshots' copies end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud/extents"
	"k8s.io/klog/v2"
)

// cowChunk is the unit of copy-before-write; see the design note above.
const cowChunk = 512 << 10

// CopyStats says how a point-in-time copy was made.
type CopyStats struct {
	// Size is the volume's size at the point in time: the bytes dst holds.
	Size int64
	// Reflinked is true when the filesystem shared the extents under the barrier and no session ran.
	Reflinked bool
	// Chunks were copied by the background copier, WriterChunks by writes before they went ahead.
	Chunks, WriterChunks int64
}

// CopyPointInTime makes dst, an empty file, hold the bytes of the volume's file at one instant, while the
// volume's device keeps being read and written: BeginPointInTime, then Finish. A missing volume file matches
// fs.ErrNotExist.
func (f *FS) CopyPointInTime(ctx context.Context, volumeID string, dst *os.File) (CopyStats, error) {
	p, err := f.BeginPointInTime(volumeID, dst)
	if err != nil {
		return CopyStats{}, err
	}
	return p.Finish(ctx)
}

// PointInTime is a copy whose instant is fixed and whose bytes are not all in dst yet: from BeginPointInTime
// on, every write to the volume first saves the chunks it changes into dst. Finish or Abort ends it.
type PointInTime struct {
	f   *FS
	v   *cowVolume
	src *os.File
	dst *os.File
	// ownsSrc: the copy closes src when done.
	ownsSrc bool
	s       *session // nil when reflinked: dst is complete
	stats   CopyStats
}

// BeginPointInTime fixes the copy's instant now (the barrier of the design note): when it returns, dst holds
// or will hold the volume's bytes of this instant, whatever is written later. Several copies of one volume may
// run at once, each with its own instant.
func (f *FS) BeginPointInTime(volumeID string, dst *os.File) (*PointInTime, error) {
	name := volumeID + f.cfg.Suffix
	if _, ok := f.volumeOf(name); !ok {
		return nil, fmt.Errorf("fuseblock: copy %q: %w", volumeID, fs.ErrNotExist)
	}
	src, err := os.Open(f.realPath(volumeID))
	if err != nil {
		return nil, fmt.Errorf("fuseblock: copy volume %s: %w", volumeID, err)
	}
	v := f.volume(volumeID)
	p, err := v.begin(src, dst, sessionOptions{})
	if err != nil {
		_ = src.Close()
		return nil, err
	}
	p.f = f
	return p, nil
}

// Reflinked says the copy was complete at its instant: Finish only syncs dst.
func (p *PointInTime) Reflinked() bool { return p.s == nil }

// Finish copies what writes have not saved yet and syncs dst. It returns when dst is complete, or with an
// error (the volume's I/O is never failed by one); dst is the caller's to rename into place or remove. It
// ends early when ctx does or the filesystem closes.
func (p *PointInTime) Finish(ctx context.Context) (CopyStats, error) {
	if p.f != nil {
		// The copy also ends when the filesystem closes.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(p.f.ctx, cancel)()
	}
	return p.v.finish(ctx, p)
}

// Abort ends the copy without completing it: writes stop saving chunks into dst.
func (p *PointInTime) Abort() {
	if p.s != nil {
		p.s.fail(context.Canceled)
		p.v.remove(p.s)
	}
	p.closeSrc()
}

func (p *PointInTime) closeSrc() {
	if p.ownsSrc {
		_ = p.src.Close()
	}
}

func (f *FS) realPath(volumeID string) string {
	return filepath.Join(f.cfg.Dir, volumeID+f.cfg.Suffix)
}

// volume is the copy-on-write state of the volume, created on first use.
func (f *FS) volume(volumeID string) *cowVolume {
	f.volMu.Lock()
	defer f.volMu.Unlock()
	if f.volumes == nil {
		f.volumes = make(map[string]*cowVolume)
	}
	v := f.volumes[volumeID]
	if v == nil {
		v = &cowVolume{}
		f.volumes[volumeID] = v
	}
	return v
}

// forgetVolume drops the state of a removed volume. A handle still open on the removed file keeps its own
// pointer and writes to the unlinked inode, which no copy reads.
func (f *FS) forgetVolume(volumeID string) {
	f.volMu.Lock()
	defer f.volMu.Unlock()
	delete(f.volumes, volumeID)
}

// cowVolume is one volume's gate and running sessions.
type cowVolume struct {
	// gate: read side for each write or fallocate (copy-before-write included), write side to start or end a
	// session.
	gate     sync.RWMutex
	sessions []*session // changed under the gate's write side
}

// modify runs do, a write or fallocate of n bytes at off, after the chunks it touches have been copied by
// every running session.
func (v *cowVolume) modify(off, n int64, do func() error) error {
	v.gate.RLock()
	defer v.gate.RUnlock()
	for _, s := range v.sessions {
		s.preserve(off, n)
	}
	return do()
}

// sessionOptions are the seams tests use.
type sessionOptions struct {
	chunk int64 // 0 is cowChunk
	// noReflink forces a session on filesystems that can reflink.
	noReflink bool
	// copy copies n bytes at off from src to dst; nil is copyData.
	copy func(dst, src *os.File, off, n int64) error
	// beforeChunk runs before the copier considers the chunk at off.
	beforeChunk func(off int64)
}

// copyPointInTime is begin then finish; src stays the caller's.
func (v *cowVolume) copyPointInTime(ctx context.Context, src, dst *os.File, o sessionOptions) (CopyStats, error) {
	p, err := v.begin(src, dst, o)
	if err != nil {
		return CopyStats{}, err
	}
	p.ownsSrc = false
	return v.finish(ctx, p)
}

// begin syncs src (most dirty data is written back before the barrier, so the fsync inside it is short) and
// takes the barrier. The returned copy closes src when done.
func (v *cowVolume) begin(src, dst *os.File, o sessionOptions) (*PointInTime, error) {
	if o.chunk == 0 {
		o.chunk = cowChunk
	}
	if o.copy == nil {
		o.copy = copyData
	}
	if err := src.Sync(); err != nil {
		return nil, fmt.Errorf("fuseblock: sync %s: %w", src.Name(), err)
	}
	s, stats, err := v.start(src, dst, o)
	if err != nil {
		return nil, err
	}
	if s != nil {
		klog.V(2).InfoS("Point-in-time copy started", "src", src.Name(), "size", s.size)
	}
	return &PointInTime{v: v, src: src, dst: dst, ownsSrc: true, s: s, stats: stats}, nil
}

// finish runs the copier of a begun copy, removes its session and syncs dst.
func (v *cowVolume) finish(ctx context.Context, p *PointInTime) (CopyStats, error) {
	defer p.closeSrc()
	stats, s := p.stats, p.s
	var err error
	if s != nil {
		s.run(ctx)
		v.remove(s)
		stats.Chunks, stats.WriterChunks = s.copied.Load(), s.writerCopied.Load()
		if err = s.failure(); err != nil {
			err = fmt.Errorf("fuseblock: point-in-time copy of %s: %w", p.src.Name(), err)
		}
	}
	if err == nil {
		if err = p.dst.Sync(); err != nil {
			err = fmt.Errorf("fuseblock: sync copy: %w", err)
		}
	}
	if err != nil {
		klog.InfoS("Point-in-time copy failed; the volume's I/O goes on", "src", p.src.Name(), "err", err)
		return stats, err
	}
	klog.V(2).InfoS("Point-in-time copy done", "src", p.src.Name(), "chunks", stats.Chunks, "writerChunks", stats.WriterChunks)
	return stats, nil
}

// remove takes a session off the volume once no write is inside its copy-before-write.
func (v *cowVolume) remove(s *session) {
	v.gate.Lock()
	defer v.gate.Unlock()
	v.sessions = slices.DeleteFunc(v.sessions, func(x *session) bool { return x == s })
}

// start is the barrier: with no write in flight it syncs src, records the size, and either reflinks dst
// (returning no session) or installs a session.
func (v *cowVolume) start(src, dst *os.File, o sessionOptions) (*session, CopyStats, error) {
	v.gate.Lock()
	defer v.gate.Unlock()
	return v.startLocked(src, dst, o)
}

// startLocked is start under the gate's write side.
func (v *cowVolume) startLocked(src, dst *os.File, o sessionOptions) (*session, CopyStats, error) {
	if err := unix.Fdatasync(int(src.Fd())); err != nil {
		return nil, CopyStats{}, fmt.Errorf("fuseblock: sync %s: %w", src.Name(), err)
	}
	st, err := src.Stat()
	if err != nil {
		return nil, CopyStats{}, fmt.Errorf("fuseblock: stat %s: %w", src.Name(), err)
	}
	stats := CopyStats{Size: st.Size()}
	if !o.noReflink && unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil {
		stats.Reflinked = true
		return nil, stats, nil
	}
	if err := dst.Truncate(stats.Size); err != nil {
		return nil, stats, fmt.Errorf("fuseblock: size copy %s: %w", dst.Name(), err)
	}
	nChunks := (stats.Size + o.chunk - 1) / o.chunk
	s := &session{
		src: src, dst: dst, size: stats.Size, chunk: o.chunk, copy: o.copy, beforeChunk: o.beforeChunk,
		done: make([]uint64, (nChunks+63)/64),
		busy: make(map[int64]chan struct{}),
	}
	v.sessions = append(v.sessions, s)
	return s, stats, nil
}

// session is one running copy.
type session struct {
	src, dst    *os.File
	size, chunk int64
	copy        func(dst, src *os.File, off, n int64) error
	beforeChunk func(off int64)

	mu   sync.Mutex
	done []uint64                // bit per chunk: its point-in-time bytes are in dst (or the session failed)
	busy map[int64]chan struct{} // chunks being copied; the channel closes when done
	err  error                   // first copy failure

	failed               atomic.Bool
	copied, writerCopied atomic.Int64
}

// claim decides chunk idx for its caller: copy it (mine), wait for wait to close, or nothing (done).
func (s *session) claim(idx int64) (mine bool, wait chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done[idx/64]&(1<<(idx%64)) != 0 {
		return false, nil
	}
	if ch, ok := s.busy[idx]; ok {
		return false, ch
	}
	s.busy[idx] = make(chan struct{})
	return true, nil
}

// finish marks a claimed chunk done, copied or not (a failed session copies nothing more), and wakes its
// waiters.
func (s *session) finish(idx int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done[idx/64] |= 1 << (idx % 64)
	close(s.busy[idx])
	delete(s.busy, idx)
}

// copyChunk copies chunk idx, which the caller has claimed; a failure fails the session.
func (s *session) copyChunk(idx int64) bool {
	defer s.finish(idx)
	if s.failed.Load() {
		return false
	}
	off := idx * s.chunk
	if err := copyExtents(s.dst, s.src, off, min(off+s.chunk, s.size), s.copy); err != nil {
		s.fail(fmt.Errorf("copy chunk at %d to %s: %w", off, s.dst.Name(), err))
		return false
	}
	return true
}

func (s *session) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.failed.Store(true)
}

func (s *session) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// preserve makes sure the point-in-time bytes of every chunk that [off, off+n) touches are in dst before the
// caller changes them. It never fails the caller: a failed copy fails the session instead.
func (s *session) preserve(off, n int64) {
	if s.failed.Load() || n <= 0 || off >= s.size {
		return
	}
	end := min(off+n, s.size)
	for idx := off / s.chunk; idx*s.chunk < end; idx++ {
		mine, wait := s.claim(idx)
		switch {
		case mine:
			if s.copyChunk(idx) {
				s.writerCopied.Add(1)
			}
		case wait != nil:
			<-wait
		}
	}
}

// run is the background copier: every data chunk not yet copied, in order; then it waits for the copies
// writers still have in hand. A failure is the session's (failure).
func (s *session) run(ctx context.Context) {
	fd := int(s.src.Fd())
	for off := int64(0); off < s.size; {
		if err := ctx.Err(); err != nil {
			s.fail(err)
			break
		}
		if s.failed.Load() {
			break
		}
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			data = s.size // only hole from off on
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
			data = off // no extent map: every chunk is data
		case err != nil:
			s.fail(fmt.Errorf("seek data in %s: %w", s.src.Name(), err))
		}
		if s.failed.Load() || data >= s.size {
			break
		}
		idx := data / s.chunk
		if s.beforeChunk != nil {
			s.beforeChunk(idx * s.chunk)
		}
		if mine, _ := s.claim(idx); mine && s.copyChunk(idx) {
			s.copied.Add(1)
		}
		off = (idx + 1) * s.chunk
	}
	s.waitBusy()
}

// waitBusy waits until no chunk is being copied.
func (s *session) waitBusy() {
	for {
		s.mu.Lock()
		var ch chan struct{}
		for _, c := range s.busy {
			ch = c
			break
		}
		s.mu.Unlock()
		if ch == nil {
			return
		}
		<-ch
	}
}

// copyExtents copies the data extents of src in [off, end) to the same offsets of dst, leaving holes alone.
func copyExtents(dst, src *os.File, off, end int64, copyFn func(dst, src *os.File, off, n int64) error) error {
	return extents.Each(src, off, end, func(off, n int64, _ bool) error { return copyFn(dst, src, off, n) })
}

// copyData copies n bytes at off from src to dst in the kernel (copy_file_range), or through a buffer where
// the kernel cannot.
func copyData(dst, src *os.File, off, n int64) error {
	for n > 0 {
		roff, woff := off, off
		w, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, int(n), 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) ||
				errors.Is(err, unix.EINVAL) {
				return bufferCopy(dst, src, off, n)
			}
			return fmt.Errorf("copy %s at %d: %w", src.Name(), off, err)
		}
		if w == 0 {
			return fmt.Errorf("copy %s at %d: %w", src.Name(), off, io.ErrUnexpectedEOF)
		}
		off += int64(w)
		n -= int64(w)
	}
	return nil
}

func bufferCopy(dst, src *os.File, off, n int64) error {
	buf := make([]byte, n)
	r, err := src.ReadAt(buf, off)
	if r < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read %s at %d: %w", src.Name(), off, err)
	}
	if _, err := dst.WriteAt(buf, off); err != nil {
		return fmt.Errorf("write %s at %d: %w", dst.Name(), off, err)
	}
	return nil
}
