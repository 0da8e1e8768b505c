package blockdev

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

const (
	loopControl = "/dev/loop-control"
	// attachAttempts bounds the LOOP_CTL_GET_FREE race: another process (or goroutine) may bind the device we
	// were offered before we do, and the kernel then answers EBUSY.
	attachAttempts = 8
	// releaseWait is how long a detach waits for the kernel to drop a device it was not holding.
	releaseWait = 2 * time.Second
)

// attachLoop binds backingFile to loop device number want or, when want is negative, to a free device whose
// number avoid does not refuse, and returns "/dev/loopN". The device is bound without autoclear, so it survives
// this process and stays until it is detached explicitly. flags are LO_FLAGS_* to bind with
// (LO_FLAGS_DIRECT_IO); a kernel that refuses direct I/O for the file gets a buffered device. Binding a wanted
// number that is taken fails with an error matching unix.EBUSY.
func attachLoop(ctx context.Context, backingFile string, flags uint32, want int, avoid func(n int) bool) (string, error) {
	// A plain descriptor, not an *os.File: Go would register it with epoll, and epoll_ctl on a file of a FUSE
	// filesystem served by this very process asks that server while holding the runtime's epoll lock.
	fd, err := unix.Open(backingFile, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open backing file: %w", err)
	}
	// The kernel keeps its own reference to the file once bound.
	defer unix.Close(fd)
	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", loopControl, err)
	}
	defer unix.Close(ctl)
	if want >= 0 {
		if err := addLoop(ctl, want); err != nil {
			return "", err
		}
		return bindLoop(want, fd, backingFile, flags)
	}

	var lastErr error
	for attempt := range attachAttempts {
		if attempt > 0 {
			if err := ctxsleep.Sleep(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
				return "", err
			}
		}
		n, err := freeLoop(ctl, avoid)
		if err != nil {
			return "", err
		}
		dev, err := bindLoop(n, fd, backingFile, flags)
		if errors.Is(err, unix.EBUSY) {
			klog.V(4).InfoS("Free loop device taken by someone else, retrying", "number", n, "attempt", attempt)
			lastErr = err
			continue
		}
		if err != nil {
			return "", err
		}
		return dev, nil
	}
	return "", fmt.Errorf("no free loop device after %d attempts: %w", attachAttempts, lastErr)
}

// freeLoop returns the number of an unbound loop device that avoid does not refuse, creating the device when
// it does not exist yet. The kernel offers the lowest unbound number; when that one is refused, the next
// numbers that are neither refused nor bound are taken instead.
func freeLoop(ctl int, avoid func(n int) bool) (int, error) {
	n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
	if err != nil {
		return 0, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
	}
	if avoid == nil || !avoid(n) {
		return n, nil
	}
	for n++; ; n++ {
		if avoid(n) {
			continue
		}
		_, bound, err := hostSysfs().Read("loop" + strconv.Itoa(n))
		if err != nil {
			return 0, err
		}
		if !bound {
			return n, addLoop(ctl, n)
		}
	}
}

// addLoop makes sure loop device n exists (LOOP_CTL_ADD); one that exists already is fine.
func addLoop(ctl, n int) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(ctl), unix.LOOP_CTL_ADD, uintptr(n))
	if errno != 0 && errno != unix.EEXIST {
		return fmt.Errorf("LOOP_CTL_ADD %d: %w", n, errno)
	}
	return nil
}

// bindLoop binds the open backing file to loop device n. An EBUSY error means someone else took the device.
func bindLoop(n, backingFd int, backingFile string, flags uint32) (string, error) {
	// The device exists in the kernel now, but /dev may not be managed by devtmpfs/udev (typical in containers).
	dev, err := hostSysfs().EnsureDeviceNode(loopdev.Device{Name: "loop" + strconv.Itoa(n), Number: n}, "/dev")
	if err != nil {
		return "", err
	}
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)

	cfg := unix.LoopConfig{Fd: uint32(backingFd)}
	cfg.Info.Flags = flags
	setLoopName(&cfg.Info, backingFile)
	err = unix.IoctlLoopConfigure(fd, &cfg)
	if err == nil {
		return dev, nil
	}
	if !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		return "", fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
	}

	// Kernels before 5.8 lack LOOP_CONFIGURE: bind first, then describe.
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_FD, backingFd); err != nil {
		return "", fmt.Errorf("LOOP_SET_FD %s: %w", dev, err)
	}
	var info unix.LoopInfo64
	setLoopName(&info, backingFile)
	if err := unix.IoctlLoopSetStatus64(fd, &info); err != nil {
		_ = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		return "", fmt.Errorf("LOOP_SET_STATUS64 %s: %w", dev, err)
	}
	// LOOP_SET_STATUS64 cannot set direct I/O; a device that stays buffered still works.
	if flags&unix.LO_FLAGS_DIRECT_IO != 0 {
		if err := unix.IoctlSetInt(fd, unix.LOOP_SET_DIRECT_IO, 1); err != nil {
			klog.InfoS("Loop device left without direct I/O", "device", dev, "file", backingFile, "err", err)
		}
	}
	return dev, nil
}

// setLoopName records the backing path in lo_file_name (what losetup shows when sysfs is unavailable); the
// kernel field holds 63 bytes plus NUL, longer paths are cut.
func setLoopName(info *unix.LoopInfo64, name string) {
	copy(info.File_name[:unix.LO_NAME_SIZE-1], name)
}

// openBound opens d's device node and checks, while holding it open, that it is still bound the way the sysfs
// listing said. Holding an open file pins the binding (a clear by anyone else is deferred to our close), so
// the device cannot be released and reused for another file between the check and our ioctl. ok is false
// when the device is no longer bound as expected.
func openBound(d loopdev.Device, flags int) (fd int, ok bool, err error) {
	fd, err = unix.Open(d.Path(), flags|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
			return -1, false, nil
		}
		return -1, false, fmt.Errorf("open %s: %w", d.Path(), err)
	}
	now, bound, err := hostSysfs().Read(d.Name)
	if err != nil || !bound || now.Backing != d.Backing || now.Deleted != d.Deleted {
		unix.Close(fd)
		return -1, false, err
	}
	return fd, true, nil
}

// clearLoop unbinds d. An exclusive open tells whether something (a mount, a device-mapper table, mkfs) holds
// the device: then it is ErrBusy, or with force a deferred clear that the kernel completes when the holder
// lets go. held reports that deferred case.
func clearLoop(d loopdev.Device, force bool) (held bool, err error) {
	fd, ok, err := openBound(d, unix.O_RDONLY|unix.O_EXCL)
	if errors.Is(err, unix.EBUSY) {
		if !force {
			return true, fmt.Errorf("%s: %w", d.Path(), ErrBusy)
		}
		held = true
		fd, ok, err = openBound(d, unix.O_RDONLY)
	}
	if err != nil || !ok {
		return held, err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return held, fmt.Errorf("LOOP_CLR_FD %s: %w", d.Path(), err)
	}
	return held, nil
}

// waitReleased waits until d no longer serves its backing file. The kernel finishes a clear on the last close,
// which is normally ours; udev or blkid probing the device can delay it briefly. Timing out is not an error:
// the device is marked autoclear by then and no longer counts as attached.
func waitReleased(ctx context.Context, d loopdev.Device) error {
	deadline := time.Now().Add(releaseWait)
	for time.Now().Before(deadline) {
		now, bound, err := hostSysfs().Read(d.Name)
		if err != nil {
			return err
		}
		if !bound || now.Backing != d.Backing {
			return nil
		}
		if err := ctxsleep.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// setLoopCapacity makes the kernel re-read the backing file's size, so a grown volume is visible online.
func setLoopCapacity(d loopdev.Device) error {
	fd, ok, err := openBound(d, unix.O_RDONLY)
	if err != nil || !ok {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("LOOP_SET_CAPACITY %s: %w", d.Path(), err)
	}
	return nil
}

// syncLoop flushes writes made through the device into its backing file, so a copy of the file taken next is
// as current as the device. Best effort: callers go on with the copy when it fails.
func syncLoop(d loopdev.Device) error {
	fd, ok, err := openBound(d, unix.O_RDONLY)
	if err != nil || !ok {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("fsync %s: %w", d.Path(), err)
	}
	return nil
}

// syncLoopBounded is syncLoop within FlushBound. A flush stuck in the kernel is left behind: its goroutine ends
// whenever the device answers, and the caller goes on without it.
func syncLoopBounded(ctx context.Context, d loopdev.Device, bound time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- syncLoop(d) }()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("flush %s for %v: %w", d.Path(), bound, ErrFlushTimeout)
	case <-ctx.Done():
		return fmt.Errorf("flush %s: %w", d.Path(), ctx.Err())
	}
}
