// Package hostclean releases what a run left on the host below one directory it owns: the mounts there and the
// loop devices backed by files there. It touches nothing outside that directory. Tests, the demo and the e2e
// harness use it to leave the machine as they found it, also after a failure.
package hostclean

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// Clean unmounts everything below dir, then releases the loop devices backed by files below dir.
func Clean(dir string) error {
	return errors.Join(UnmountUnder(dir), ReleaseLoopsUnder(dir))
}

// UnmountUnder unmounts every mount point at or below dir, deepest first, lazily so that a busy one still goes.
func UnmountUnder(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}

// ReleaseLoopsUnder detaches the loop devices whose backing file lies below dir; the kernel completes the
// release of a device still held once its holder lets go.
func ReleaseLoopsUnder(dir string) error {
	devs, err := loopdev.Sysfs{}.BackedUnder(dir)
	if err != nil {
		return err
	}
	return releaseLoops(devs, func(*os.File) bool { return true })
}

// ReleaseLoopsOnFilesystem detaches the loop devices whose backing file lives on the filesystem with device
// number fsDev (as stat reports it), wherever it is mounted or was: a filesystem lazily unmounted, or mounted
// only in a mount namespace that is gone, has no path left to name its files by.
func ReleaseLoopsOnFilesystem(fsDev uint64) error {
	devs, err := loopdev.Sysfs{}.List()
	if err != nil {
		return err
	}
	return releaseLoops(devs, func(f *os.File) bool {
		st, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		return err == nil && st.Device == fsDev
	})
}

// releaseLoops clears the devices that match, judged on the opened device.
func releaseLoops(devs []loopdev.Device, match func(*os.File) bool) error {
	var errs []error
	for _, d := range devs {
		f, err := os.Open(d.Path())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if match(f) {
			if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
				errs = append(errs, fmt.Errorf("release %s: %w", d.Path(), err))
			}
		}
		_ = f.Close()
	}
	return errors.Join(errs...)
}
