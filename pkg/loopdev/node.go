package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DevNumbers returns the device's major and minor numbers from <Root>/loopN/dev ("7:N"). They come from sysfs
// rather than being assumed 7:N because the loop driver's max_part parameter changes the minor.
func (s Sysfs) DevNumbers(d Device) (major, minor uint32, err error) {
	if _, ok := loopNumber(d.Name); !ok {
		return 0, 0, fmt.Errorf("loopdev: %q is not a loop device name", d.Name)
	}
	file := filepath.Join(s.root(), d.Name, "dev")
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, fmt.Errorf("device numbers of %s: %w", d.Name, err)
	}
	ma, mi, ok := strings.Cut(strings.TrimSpace(string(raw)), ":")
	if ok {
		a, errA := strconv.ParseUint(ma, 10, 32)
		b, errB := strconv.ParseUint(mi, 10, 32)
		if errA == nil && errB == nil {
			return uint32(a), uint32(b), nil
		}
	}
	return 0, 0, fmt.Errorf("device numbers of %s: malformed %s: %q", d.Name, file, raw)
}

// EnsureDeviceNode returns devDir/loopN, first creating it as a block device node with the numbers sysfs
// reports when it does not exist: the device exists in the kernel, but a /dev not managed by devtmpfs/udev
// (typical in containers) may lack the node. An existing entry is returned as it is. Creating a node needs
// CAP_MKNOD.
func (s Sysfs) EnsureDeviceNode(d Device, devDir string) (string, error) {
	if _, ok := loopNumber(d.Name); !ok {
		return "", fmt.Errorf("loopdev: %q is not a loop device name", d.Name)
	}
	node := filepath.Join(devDir, d.Name)
	if _, err := os.Stat(node); err == nil || !errors.Is(err, os.ErrNotExist) {
		if err != nil {
			return "", err
		}
		return node, nil
	}
	major, minor, err := s.DevNumbers(d)
	if err != nil {
		return "", err
	}
	err = unix.Mknod(node, unix.S_IFBLK|0o660, int(unix.Mkdev(major, minor)))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return "", fmt.Errorf("mknod %s: %w", node, err)
	}
	return node, nil
}
