package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// sysBlock is where the kernel lists block devices; tests point the unexported helpers at a fake tree.
const sysBlock = "/sys/block"

// deletedSuffix is what d_path appends to a backing file that was unlinked while the device held it open.
const deletedSuffix = " (deleted)"

// loopDevice is one bound loop device as sysfs describes it.
type loopDevice struct {
	name      string // "loop3"
	number    int    // 3
	backing   string // backing file path without the " (deleted)" marker
	deleted   bool   // the backing file was unlinked; the device still holds the old inode
	autoclear bool   // the device is released on last close; for fakecloud's devices a forced detach is pending
}

func (d loopDevice) devPath() string { return "/dev/" + d.name }

// live reports whether the device still serves its backing file under that name: a deleted backing file is a
// different file than whatever now has the name, and an autoclear device is on its way out.
func (d loopDevice) live() bool { return !d.deleted && !d.autoclear }

// listLoopDevices returns the bound loop devices under sysRoot ordered by number. Unbound devices have no
// "loop" directory and are left out; so is a device that unbinds while being read.
func listLoopDevices(sysRoot string) ([]loopDevice, error) {
	entries, err := os.ReadDir(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", sysRoot, err)
	}
	var devs []loopDevice
	for _, e := range entries {
		d, bound, err := readLoopDevice(sysRoot, e.Name())
		if err != nil {
			return nil, err
		}
		if bound {
			devs = append(devs, d)
		}
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].number < devs[j].number })
	return devs, nil
}

// readLoopDevice reads one device's binding; bound is false for names that are not loop devices and for loop
// devices without a backing file.
func readLoopDevice(sysRoot, name string) (d loopDevice, bound bool, err error) {
	num, ok := loopNumber(name)
	if !ok {
		return loopDevice{}, false, nil
	}
	dir := filepath.Join(sysRoot, name, "loop")
	raw, err := os.ReadFile(filepath.Join(dir, "backing_file"))
	if err != nil {
		if gone(err) {
			return loopDevice{}, false, nil
		}
		return loopDevice{}, false, fmt.Errorf("read backing file of %s: %w", name, err)
	}
	backing := strings.TrimSuffix(string(raw), "\n")
	backing, deleted := strings.CutSuffix(backing, deletedSuffix)
	clear, err := os.ReadFile(filepath.Join(dir, "autoclear"))
	if err != nil && !gone(err) {
		return loopDevice{}, false, fmt.Errorf("read autoclear of %s: %w", name, err)
	}
	return loopDevice{
		name:      name,
		number:    num,
		backing:   backing,
		deleted:   deleted,
		autoclear: strings.TrimSpace(string(clear)) == "1",
	}, true, nil
}

// gone reports a sysfs read failing because the device unbound meanwhile: the attribute vanishes (ENOENT) or
// answers ENXIO/ENODEV while the kernel tears the binding down.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV)
}

// loopNumber parses "loopN"; partitions ("loop0p1") and other devices are rejected.
func loopNumber(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "loop")
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// canonicalPath makes a path comparable with sysfs backing_file, which is absolute with symlinks resolved.
func canonicalPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("absolute path of %s: %w", path, err)
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		return resolved, nil
	}
	return abs, nil // a missing file can still name a device whose file was deleted; compare as given
}

// FindLoopDevice returns the loop device ("/dev/loopN") whose sysfs backing_file is backingFile, or "" when no
// device serves that file. Devices whose file has been deleted, or that are already marked to release on last
// close (which is what a forced detach of a held device leaves behind), do not count: they no longer serve the
// file under that name. With several matches the lowest-numbered device wins. It only reads sysfs, so the
// CSI node plugin can use it to find a volume attached by fakecloud.
func FindLoopDevice(backingFile string) (string, error) {
	d, ok, err := findLoopDevice(sysBlock, backingFile)
	if err != nil || !ok {
		return "", err
	}
	return d.devPath(), nil
}

func findLoopDevice(sysRoot, backingFile string) (loopDevice, bool, error) {
	want, err := canonicalPath(backingFile)
	if err != nil {
		return loopDevice{}, false, err
	}
	devs, err := listLoopDevices(sysRoot)
	if err != nil {
		return loopDevice{}, false, err
	}
	for _, d := range devs {
		if d.live() && d.backing == want {
			return d, true, nil
		}
	}
	return loopDevice{}, false, nil
}
