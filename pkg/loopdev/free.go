package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The loop driver's device numbers: its block major, and /dev/loop-control (a misc character device).
const (
	blockMajor         = 7
	controlMajor       = 10
	controlMinor       = 237
	controlName        = "loop-control"
	defaultMinorStride = 1
)

// EnsureFreeNodes makes devDir hold a block device node for every loop device the kernel has now and for
// spare more, plus /dev/loop-control, creating only the entries that are missing; it returns how many it made.
//
// A container's /dev (a kind node's, say) is a copy made when the container started, so loop devices the
// kernel adds later have no node there, and `losetup -f` (kubelet's hold on a block volume) picks a free
// device whose node it then cannot open. Opening a node of a device the kernel has not made yet makes it, so
// nodes beyond the current count keep losetup working while devices are added. Minors are the index times
// the stride the loop driver's max_part gives, read from loop0 and loop1 (1 when sysfs does not say).
// An existing entry is left as it is, whatever it is. Creating nodes needs CAP_MKNOD.
func (s Sysfs) EnsureFreeNodes(devDir string, spare int) (int, error) {
	if spare < 0 {
		return 0, fmt.Errorf("loopdev: spare %d < 0", spare)
	}
	entries, err := os.ReadDir(s.root())
	if err != nil {
		return 0, fmt.Errorf("list loop devices: %w", err)
	}
	highest := -1
	for _, e := range entries {
		if n, ok := loopNumber(e.Name()); ok && n > highest {
			highest = n
		}
	}
	stride := s.minorStride()
	made := 0
	ok, err := mknodIfMissing(filepath.Join(devDir, controlName), unix.S_IFCHR, controlMajor, controlMinor)
	if err != nil {
		return made, err
	}
	if ok {
		made++
	}
	for n := 0; n <= highest+spare; n++ {
		ok, err := mknodIfMissing(filepath.Join(devDir, fmt.Sprintf("loop%d", n)), unix.S_IFBLK, blockMajor, uint32(n)*stride)
		if err != nil {
			return made, err
		}
		if ok {
			made++
		}
	}
	return made, nil
}

// minorStride is the minor distance between two loop devices (1 << the driver's partition bits).
func (s Sysfs) minorStride() uint32 {
	ma0, mi0, err0 := s.DevNumbers(Device{Name: "loop0"})
	ma1, mi1, err1 := s.DevNumbers(Device{Name: "loop1"})
	if err0 != nil || err1 != nil || ma0 != blockMajor || ma1 != blockMajor || mi1 <= mi0 {
		return defaultMinorStride
	}
	return mi1 - mi0
}

// mknodIfMissing creates the device node unless path already exists, and says whether it made it.
func mknodIfMissing(path string, kind uint32, major, minor uint32) (bool, error) {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	err := unix.Mknod(path, kind|0o660, int(unix.Mkdev(major, minor)))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mknod %s: %w", path, err)
	}
	// The mode as losetup's own nodes have it, whatever the umask.
	if err := os.Chmod(path, 0o660); err != nil {
		return true, err
	}
	return true, nil
}
