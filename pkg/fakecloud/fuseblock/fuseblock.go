// Package fuseblock serves fakecloud's volume files through a FUSE filesystem of its own, so that every block
// I/O of an attached volume passes through fakecloud's code.
//
// Data path: a process writes to /dev/loopN → the loop driver turns each bio into a read or write of its
// backing file, which is <mount>/<id>.img on this filesystem → the FUSE kernel module sends the request over
// /dev/fuse → a handler here asks the Policy (faults, limits, hydration: later items of issue 25) and then
// preads or pwrites the real sparse file <data-dir>/volumes/<id>.img → the reply goes back the same way. A
// flush of the loop device (fsync, FUA, a filesystem journal commit) arrives as FUSE_FSYNC and fsyncs the
// real file, so what a pod fsyncs is on the data directory's disk when the fsync returns.
//
// Caching: the kernel could cache at three levels below the guest (the FUSE file's page cache, the real
// file's page cache, and the loop device's own), and any cache between the loop device and this server hides
// I/O from it. Files are opened FOPEN_DIRECT_IO, so the FUSE file has no page cache whoever opens it, and the
// loop device is bound with LO_FLAGS_DIRECT_IO (blockdev), so it issues asynchronous direct I/O (with
// CAP_ASYNC_DIO many requests are in flight at once) instead of one buffered request at a time from its
// worker. FOPEN_PARALLEL_DIRECT_WRITES lets those writes run in parallel rather than under the inode lock.
// The real file's page cache stays: it sits behind the server, like a storage array's cache behind EBS. The
// cache above the loop device belongs to the guest (as a page cache above an EBS disk does), and I/O it
// absorbs never reached EBS either. Measured choices are in blockdev's fuse_backend.go.
//
// Isolation of volumes. The loop driver's direct I/O is asynchronous (a kiocb with a completion), and the FUSE
// kernel module sends asynchronous requests as "background" requests: a connection lets at most max_background
// of them be in flight to the server; the next one waits in the kernel's bg_queue and, once the limit is
// reached, the connection is "blocked" and every submitter of background I/O sleeps until a reply frees a
// slot. The server only sees a request once it is in flight, so it cannot reorder or refuse what waits in the
// kernel: a policy that holds or delays a request (a hang, a rate limit, a hydration fetch) keeps its slot
// until it answers. With the kernel's default of 12, or the 128 used before, one held or throttled volume
// filled the slots and stalled every volume on the mount (a 4 KiB read of an idle volume took seconds).
// Invariant: max_background is the protocol's largest, 65535, and every volume's in-flight requests are
// bounded by its own loop device, whose queue keeps at most nr_requests (128) requests of at most
// max_sectors_kb (1280 KiB, two FUSE requests of maxIO) each: 256 per volume, so up to 255 bound devices
// can never fill the slots, and a volume's held requests wait only in its own device's queue, never in a
// shared one. Each held request costs the server a goroutine and, for a write, its payload buffer; fakecloud
// runs far fewer attached volumes than that bound. BenchmarkFuseIsolation (blockdev) measures it. One FUSE
// connection per volume would give the same isolation at the price of a mount per attach and N stale mounts
// to clean after a crash.
//
// The server runs inside fakecloud: when the process dies, the kernel aborts the connection and every loop
// device on the mount fails its I/O, as a disk does when its array goes away. The next start finds the stale
// mount (ENOTCONN) with Inspect and removes it; blockdev re-binds the devices.
package fuseblock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DevFuse is the device the kernel's FUSE module is reached through.
const DevFuse = "/dev/fuse"

// fsType is how the mount shows in /proc/self/mountinfo: "fuse." and go-fuse's subtype.
const (
	fsSubtype = "fakecloud"
	fsType    = "fuse." + fsSubtype
)

// maxIO is the largest read or write the kernel sends in one request: 1 MiB, the kernel's default maximum
// (fs.fuse.max_pages_limit), so a 1 MiB bio is one round trip.
const maxIO = 1 << 20

// maxBackground bounds the asynchronous direct I/O requests the kernel keeps in flight on the mount, shared by
// every volume on it: the largest the protocol carries (a uint16), so that no volume's held requests can use
// up another's (see "Isolation of volumes" above). The kernel caps it only for mounts made without
// CAP_SYS_ADMIN, which fakecloud needs to mount at all.
const maxBackground = 65535

// Op is the kind of an I/O request.
type Op uint8

const (
	OpRead Op = iota + 1
	OpWrite
	// OpFsync is a flush of the device: an fsync, a FUA write or a filesystem's barrier in the guest.
	OpFsync
	// OpFallocate is a discard or write-zeroes of the device, which the loop driver turns into a hole punch or
	// zeroed range of the file.
	OpFallocate
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFsync:
		return "fsync"
	case OpFallocate:
		return "fallocate"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// IO is one request on a volume. Off and Len are bytes of the volume; both are 0 for OpFsync.
type IO struct {
	Volume string
	Op     Op
	Off    int64
	Len    int64
}

// Policy sees every request before it reaches the volume's file. Before may sleep (added latency, a rate
// limit, a hang until released; honouring ctx, which ends when the filesystem closes), refuse the request by
// returning an error (a syscall.Errno reaches the device as that errno, any other error as EIO), or return nil
// to let it through. It is called concurrently, for many volumes at once.
type Policy interface {
	Before(ctx context.Context, io IO) error
}

// Forgetter is a Policy that keeps state per volume: FS.Forget tells it when a volume is deleted, so that its
// state does not outlive the volume. A request for the volume after that is a new volume's.
type Forgetter interface {
	Forget(volumeID string)
}

// forgetIn tells p, or each policy of a Chain, that the volume is gone.
func forgetIn(p Policy, volumeID string) {
	if f, ok := p.(Forgetter); ok {
		f.Forget(volumeID)
	}
}

// NopPolicy lets every request through.
type NopPolicy struct{}

func (NopPolicy) Before(context.Context, IO) error { return nil }

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(ctx context.Context, io IO) error

func (f PolicyFunc) Before(ctx context.Context, io IO) error { return f(ctx, io) }

// Available reports why FUSE cannot be used here, or nil: fakecloud mounts through /dev/fuse itself, as root,
// without fusermount.
func Available() error { return availableAt(DevFuse) }

func availableAt(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("FUSE needs %s: %w", dev, err)
	}
	return unix.Close(fd)
}

// Config says what to serve where.
type Config struct {
	// Dir holds the real files; every regular file in it named <id><Suffix> (and not hidden) is served.
	Dir string
	// Suffix ends the served names (".img").
	Suffix string
	// MountPoint is an existing, empty directory with nothing mounted on it (see Inspect).
	MountPoint string
	// Policy sees every request; nil is NopPolicy.
	Policy Policy
}

// FS is a mounted, served filesystem.
type FS struct {
	cfg    Config
	policy Policy
	root   *rootNode
	server *fuse.Server
	// ctx is given to the Policy: it ends at Close, so requests a policy holds are let go. The kernel's own
	// interrupts are not used because the loop driver's requests are never interrupted.
	ctx    context.Context
	cancel context.CancelFunc
	served chan struct{} // closed when the serve loop has ended
	once   sync.Once
	err    error

	volMu   sync.Mutex
	volumes map[string]*cowVolume // copy-on-write state per volume ID (cow.go)
}

// Mount mounts a FUSE filesystem on cfg.MountPoint and serves it until Close. It opens /dev/fuse and mounts
// directly (root, no fusermount); the descriptor is close-on-exec, so a child process cannot keep the
// connection alive after fakecloud dies.
func Mount(cfg Config) (*FS, error) {
	if cfg.Policy == nil {
		cfg.Policy = NopPolicy{}
	}
	var st unix.Stat_t
	if err := unix.Stat(cfg.MountPoint, &st); err != nil {
		return nil, fmt.Errorf("fuseblock: mount point %s: %w", cfg.MountPoint, err)
	}
	fd, err := unix.Open(DevFuse, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fuseblock: FUSE needs %s: %w", DevFuse, err)
	}
	// default_permissions makes the kernel enforce the files' 0600 mode, which allow_other would otherwise open
	// to every user; allow_other lets root in other user namespaces (a containerised node plugin) look.
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d,default_permissions,allow_other",
		fd, st.Mode&unix.S_IFMT, os.Geteuid(), os.Getegid(), maxIO)
	if err := unix.Mount(fsSubtype, cfg.MountPoint, fsType, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fuseblock: mount %s: %w", cfg.MountPoint, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	f := &FS{cfg: cfg, policy: cfg.Policy, ctx: ctx, cancel: cancel, served: make(chan struct{})}
	f.root = &rootNode{fsys: f}
	zero := time.Duration(0)
	// Timeouts of 0: sizes change under the kernel (resize, restore) and volumes come and go, so the kernel
	// asks again each time; lookups and stats are rare next to reads and writes.
	opts := &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			MaxWrite:          maxIO,
			MaxBackground:     maxBackground,
			FsName:            fsSubtype,
			Name:              fsSubtype,
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			DisableXAttrs:     true,
		},
	}
	// The magic /dev/fd/N mount point hands go-fuse the descriptor mounted above.
	srv, err := fuse.NewServer(fs.NewNodeFS(f.root, opts), fmt.Sprintf("/dev/fd/%d", fd), &opts.MountOptions)
	if err != nil {
		// go-fuse has closed fd on every path that fails after taking it.
		cancel()
		_ = unix.Unmount(cfg.MountPoint, unix.MNT_DETACH)
		return nil, fmt.Errorf("fuseblock: start server on %s: %w", cfg.MountPoint, err)
	}
	f.server = srv
	go func() {
		defer close(f.served)
		srv.Serve()
	}()
	disablePoll(cfg.MountPoint)
	klog.InfoS("Serving volume files through FUSE", "mountPoint", cfg.MountPoint, "dir", cfg.Dir)
	return f, nil
}

// Path is where the volume's file appears on the mount.
func (f *FS) Path(volumeID string) string {
	return filepath.Join(f.cfg.MountPoint, volumeID+f.cfg.Suffix)
}

// MountPoint is where the filesystem is mounted.
func (f *FS) MountPoint() string { return f.cfg.MountPoint }

// Forget tells the kernel that the volume's file is gone (its real file was removed), so that a loop device
// still holding it reports its backing file "(deleted)" as it does for a removed plain file, and the policy
// (a Forgetter) that the volume's state may go.
func (f *FS) Forget(volumeID string) {
	f.forgetVolume(volumeID)
	forgetIn(f.policy, volumeID)
	name := volumeID + f.cfg.Suffix
	if child := f.root.GetChild(name); child != nil {
		if errno := f.root.NotifyDelete(name, child); errno != 0 && errno != syscall.ENOENT {
			klog.V(2).InfoS("FUSE delete notification failed", "volume", volumeID, "err", errno)
		}
	}
}

// closeWait bounds how long Close waits for the serve loop after unmounting. The loop only ends once the
// kernel has dropped the filesystem, which a loop device still holding one of its files delays.
const closeWait = 5 * time.Second

// Close unmounts and stops serving. Requests a policy holds are let go first. When files are still held open
// (a loop device whose release waits for its holder), the mount is detached lazily: it leaves the mount table
// at once, and the kernel drops it, ending the serve loop, when the last holder lets go or fakecloud exits.
func (f *FS) Close() error {
	f.once.Do(func() {
		f.cancel()
		err := unix.Unmount(f.cfg.MountPoint, 0)
		if errors.Is(err, unix.EBUSY) {
			klog.InfoS("FUSE mount still in use; detaching it lazily", "mountPoint", f.cfg.MountPoint)
			err = unix.Unmount(f.cfg.MountPoint, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			f.err = fmt.Errorf("fuseblock: unmount %s: %w", f.cfg.MountPoint, err)
			return
		}
		select {
		case <-f.served:
		case <-time.After(closeWait):
			klog.InfoS("FUSE filesystem still held after unmount; it is served until released", "mountPoint", f.cfg.MountPoint)
		}
	})
	return f.err
}

// before runs the policy for one request and turns its verdict into an errno.
func (f *FS) before(volumeID string, op Op, off, n int64) syscall.Errno {
	err := f.policy.Before(f.ctx, IO{Volume: volumeID, Op: op, Off: off, Len: n})
	if err == nil {
		return 0
	}
	klog.V(4).InfoS("I/O refused by policy", "volume", volumeID, "op", op.String(), "off", off, "len", n, "err", err)
	return toErrno(err)
}

// pollHackName is the file go-fuse answers FUSE_POLL for with ENOSYS (its WaitMount does this, but not for a
// mount handed over as /dev/fd/N).
const pollHackName = ".go-fuse-epoll-hack"

// disablePoll makes the kernel stop sending FUSE_POLL. Go registers every file it opens with its epoll set, and
// epoll_ctl on a FUSE file asks the server (FUSE_POLL) while holding that set's lock, which the runtime's
// network poller waits for: a process that serves FUSE and opens its own files (attaching a loop device, say)
// deadlocks in D state. One poll answered ENOSYS makes the kernel treat the files as always ready instead.
func disablePoll(mountPoint string) {
	fd, err := unix.Open(filepath.Join(mountPoint, pollHackName), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		klog.ErrorS(err, "Disabling FUSE poll failed", "mountPoint", mountPoint)
		return
	}
	_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
}

// Chain asks each policy in turn and stops at the first refusal: faults first, then limits, so that a refused
// request spends no tokens. Nil policies are skipped.
func Chain(policies ...Policy) Policy {
	var ps []Policy
	for _, p := range policies {
		if p != nil {
			ps = append(ps, p)
		}
	}
	switch len(ps) {
	case 0:
		return NopPolicy{}
	case 1:
		return ps[0]
	}
	return chain(ps)
}

type chain []Policy

func (c chain) Forget(volumeID string) {
	for _, p := range c {
		forgetIn(p, volumeID)
	}
}

func (c chain) Before(ctx context.Context, io IO) error {
	for _, p := range c {
		if err := p.Before(ctx, io); err != nil {
			return err
		}
	}
	return nil
}
