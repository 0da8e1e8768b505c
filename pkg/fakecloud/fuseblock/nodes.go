package fuseblock

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// openFlags: no page cache for the FUSE file, and direct writes in parallel (see the package comment).
const openFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES

// spliceMin is the smallest read that is spliced rather than copied through the server.
const spliceMin = 64 << 10

// fileMode is what the volume files show: only root reads or writes them (default_permissions enforces it).
const fileMode = 0o600

// rootNode is the mount's only directory: one entry per volume file in Config.Dir, looked up on demand.
type rootNode struct {
	fs.Inode
	fsys *FS
}

var (
	_ fs.NodeLookuper  = (*rootNode)(nil)
	_ fs.NodeReaddirer = (*rootNode)(nil)
	_ fs.NodeGetattrer = (*rootNode)(nil)
	_ fs.NodeStatfser  = (*rootNode)(nil)
	_ fs.NodeOpener    = (*volumeNode)(nil)
	_ fs.NodeGetattrer = (*volumeNode)(nil)
	_ fs.NodeSetattrer = (*volumeNode)(nil)
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
)

// volumeOf maps a served name to its volume ID: <id><Suffix>, not hidden (temporary copies are ".<id>…").
func (f *FS) volumeOf(name string) (string, bool) {
	id, ok := strings.CutSuffix(name, f.cfg.Suffix)
	if !ok || id == "" || strings.HasPrefix(name, ".") || strings.ContainsRune(name, '/') {
		return "", false
	}
	return id, true
}

func (r *rootNode) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	return 0
}

func (r *rootNode) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.fsys.cfg.Dir, &st); err != nil {
		return toErrno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if id, ok := r.fsys.reportOf(name); ok {
		b, ok := r.fsys.report(id)
		if !ok {
			return nil, syscall.ENOENT
		}
		out.Attr.Mode, out.Attr.Nlink, out.Attr.Size = syscall.S_IFREG|0o444, 1, uint64(len(b))
		return r.NewInode(ctx, &reportNode{fsys: r.fsys, id: id}, fs.StableAttr{Mode: syscall.S_IFREG, Gen: nameGeneration(name)}), 0
	}
	id, ok := r.fsys.volumeOf(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	path := filepath.Join(r.fsys.cfg.Dir, name)
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, toErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, syscall.ENOENT
	}
	fillAttr(&out.Attr, &st)
	ino := st.Ino
	if ino == 1 { // reserved for FUSE's root; let go-fuse pick
		ino = 0
	}
	// go-fuse hands back the node it already has for the same identity, and the kernel may not have forgotten a
	// deleted volume's node yet when the filesystem gives its inode number to a new volume's file: the
	// generation, from the name, keeps that node (its ID and path) from serving the new volume.
	attr := fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino, Gen: nameGeneration(name)}
	return r.NewInode(ctx, &volumeNode{fsys: r.fsys, id: id, path: path}, attr), 0
}

// nameGeneration is a served name's FNV-1a hash, the generation of its node.
func nameGeneration(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// Readdir lists the volume files, for people looking at the mount; the loop driver never lists.
func (r *rootNode) Readdir(context.Context) (fs.DirStream, syscall.Errno) {
	entries, err := os.ReadDir(r.fsys.cfg.Dir)
	if err != nil {
		return nil, toErrno(err)
	}
	var list []fuse.DirEntry
	for _, e := range entries {
		if _, ok := r.fsys.volumeOf(e.Name()); ok && e.Type().IsRegular() {
			list = append(list, fuse.DirEntry{Name: e.Name(), Mode: syscall.S_IFREG})
		}
	}
	return fs.NewListDirStream(list), 0
}

// fillAttr reports the real file's size and times with the served mode.
func fillAttr(a *fuse.Attr, st *syscall.Stat_t) {
	a.FromStat(st)
	a.Mode = syscall.S_IFREG | fileMode
	a.Nlink = 1
}

// volumeNode is one volume's file.
type volumeNode struct {
	fs.Inode
	fsys *FS
	id   string
	path string // the real file
}

func (n *volumeNode) Getattr(_ context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Getattr(context.Background(), out)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path, &st); err != nil {
		return toErrno(err)
	}
	fillAttr(&out.Attr, &st)
	return 0
}

// Setattr accepts what the kernel updates on its own (times, mode bits) and refuses size changes: a volume
// grows through the API (ResizeVolume), never by a truncate of its device's file.
func (n *volumeNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if errno := n.Getattr(ctx, fh, out); errno != 0 {
		return errno
	}
	if size, ok := in.GetSize(); ok && size != out.Size {
		return syscall.EPERM
	}
	return 0
}

func (n *volumeNode) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	// O_DIRECT, O_SYNC and the like describe the caller's wish for the FUSE file, not for the real one.
	f, err := os.OpenFile(n.path, int(flags)&unix.O_ACCMODE|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	return &handle{fsys: n.fsys, id: n.id, f: f, vol: n.fsys.volume(n.id)}, openFlags, 0
}

// handle is one open of a volume's file (the loop driver holds one per bound device) on the real file.
type handle struct {
	fsys *FS
	id   string
	f    *os.File
	vol  *cowVolume // writes and fallocates go through its copy-on-write gate
}

func (h *handle) Read(_ context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.fsys.before(h.id, OpRead, off, int64(len(dest))); errno != 0 {
		return nil, errno
	}
	// Large reads are spliced from the file to /dev/fuse (one copy in the kernel instead of two through this
	// process): 1 MiB sequential reads went from 1.8 to 2.6 GB/s at half the CPU. A splice costs more syscalls
	// than it saves on small reads, so they are read into the request's buffer.
	if len(dest) >= spliceMin {
		return fuse.ReadResultFd(h.f.Fd(), off, len(dest)), 0
	}
	n, err := h.f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(_ context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.fsys.before(h.id, OpWrite, off, int64(len(data))); errno != 0 {
		return 0, errno
	}
	var n int
	err := h.vol.modify(off, int64(len(data)), func() (err error) {
		n, err = h.f.WriteAt(data, off)
		return err
	})
	return uint32(n), toErrno(err)
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC: only the data (and the size) must be durable.
const fsyncFdatasync = 1

func (h *handle) Fsync(_ context.Context, flags uint32) syscall.Errno {
	if errno := h.fsys.before(h.id, OpFsync, 0, 0); errno != 0 {
		return errno
	}
	var err error
	if flags&fsyncFdatasync != 0 {
		err = unix.Fdatasync(int(h.f.Fd()))
	} else {
		err = h.f.Sync()
	}
	return toErrno(err)
}

// Flush is close(2) of the FUSE file; durability comes from Fsync.
func (h *handle) Flush(context.Context) syscall.Errno { return 0 }

func (h *handle) Allocate(_ context.Context, off, size uint64, mode uint32) syscall.Errno {
	if errno := h.fsys.before(h.id, OpFallocate, int64(off), int64(size)); errno != 0 {
		return errno
	}
	return toErrno(h.vol.modify(int64(off), int64(size), func() error {
		return unix.Fallocate(int(h.f.Fd()), mode, int64(off), int64(size))
	}))
}

func (h *handle) Getattr(_ context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
		return toErrno(err)
	}
	fillAttr(&out.Attr, &st)
	return 0
}

func (h *handle) Release(context.Context) syscall.Errno {
	return toErrno(h.f.Close())
}

// toErrno is the errno an error carries, EIO when it carries none (a short write, say).
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	return syscall.EIO
}
