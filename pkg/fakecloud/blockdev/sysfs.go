package blockdev

import "github.com/diskforge/diskforge/pkg/loopdev"

// hostSysfs is where blockdev looks its loop devices up: the host's own /sys/block, since the ioctls here act
// on real devices. Fake trees are for pkg/loopdev's tests.
func hostSysfs() loopdev.Sysfs { return loopdev.Sysfs{} }

// FindLoopDevice returns the loop device ("/dev/loopN") that serves backingFile, or "" when none does; see
// loopdev.Sysfs.FindByBackingFile for which devices count. Code outside fakecloud (the CSI node plugin) uses
// pkg/loopdev directly.
func FindLoopDevice(backingFile string) (string, error) {
	d, ok, err := hostSysfs().FindByBackingFile(backingFile)
	if err != nil || !ok {
		return "", err
	}
	return d.Path(), nil
}
