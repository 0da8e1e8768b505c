// Package loopdev finds bound loop devices through sysfs. It only reads /sys/block (and, for EnsureDeviceNode,
// creates a device node), so both fakecloud, which binds volume files to loop devices, and the CSI node
// plugin, which has to find those devices again, share one definition of "the device of this file".
//
// It is a leaf package: it imports nothing from this module.
package loopdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// DefaultRoot is where the kernel lists block devices; a zero Sysfs reads it.
const DefaultRoot = "/sys/block"

// deletedSuffix is what d_path appends to a backing file that was unlinked while the device held it open.
const deletedSuffix = " (deleted)"

// ErrAmbiguous is returned (wrapped) by FindByBackingBase when several live devices match.
var ErrAmbiguous = errors.New("several loop devices match")

// Device is one bound loop device as sysfs describes it.
type Device struct {
	Name      string // "loop3"
	Number    int    // 3
	Backing   string // backing file path without the " (deleted)" marker
	Deleted   bool   // the backing file was unlinked; the device still holds the old inode
	Autoclear bool   // the device is released on last close; for fakecloud's devices a forced detach is pending
}

// Path is the device's conventional node, "/dev/loopN". Use EnsureDeviceNode where /dev may lack it.
func (d Device) Path() string { return "/dev/" + d.Name }

// Live reports whether the device still serves its backing file under that name: a deleted backing file is a
// different file than whatever now has the name, and an autoclear device is on its way out.
func (d Device) Live() bool { return !d.Deleted && !d.Autoclear }

// DefaultPartitions is the kernel's list of the block devices that have a size.
const DefaultPartitions = "/proc/partitions"

// Sysfs reads loop devices from a sysfs block directory. The zero value reads DefaultRoot; tests set Root to a
// fake tree (<Root>/loopN/loop/backing_file, <Root>/loopN/loop/autoclear, <Root>/loopN/dev).
type Sysfs struct {
	Root string
	// Partitions lists the devices of Root that have a size, in /proc/partitions' format. Empty means
	// DefaultPartitions for the default Root and none (read every device) for another Root.
	Partitions string
}

func (s Sysfs) root() string {
	if s.Root == "" {
		return DefaultRoot
	}
	return s.Root
}

// listSized is List without the devices of size 0. The kernel lists a disk in /proc/partitions only while it
// has a size, and unbound loop devices have none: a host keeps every loop device it ever made (hundreds after a
// day of tests), and reading each one's attributes cost a volume's lookup a millisecond, against 0.05 ms for
// the list. A device bound to an empty file is left out too, as is one whose binding has not set its size yet;
// callers that must see every binding (before binding a file, say) use List. Without the list it is List.
func (s Sysfs) listSized() ([]Device, error) {
	path := s.Partitions
	if path == "" && s.Root == "" {
		path = DefaultPartitions
	}
	if path == "" {
		return s.List()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return s.List()
	}
	var names []string
	for _, line := range strings.Split(string(raw), "\n") {
		if fields := strings.Fields(line); len(fields) == 4 {
			names = append(names, fields[3])
		}
	}
	return s.readBound(names)
}

// List returns the bound loop devices ordered by number. Unbound devices have no "loop" directory and are left
// out; so is a device that unbinds while being read.
func (s Sysfs) List() ([]Device, error) {
	root := s.root()
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return s.readBound(names)
}

// readBound reads the named devices and returns the bound loop devices among them, ordered by number.
func (s Sysfs) readBound(names []string) ([]Device, error) {
	var devs []Device
	for _, name := range names {
		d, bound, err := s.Read(name)
		if err != nil {
			return nil, err
		}
		if bound {
			devs = append(devs, d)
		}
	}
	slices.SortFunc(devs, func(a, b Device) int { return a.Number - b.Number })
	return devs, nil
}

// Read reads one device's binding by name ("loop3"). bound is false for names that are not loop devices
// (partitions such as "loop0p1" included) and for loop devices without a backing file.
func (s Sysfs) Read(name string) (d Device, bound bool, err error) {
	num, ok := loopNumber(name)
	if !ok {
		return Device{}, false, nil
	}
	dir := filepath.Join(s.root(), name, "loop")
	raw, err := os.ReadFile(filepath.Join(dir, "backing_file"))
	if err != nil {
		if gone(err) {
			return Device{}, false, nil
		}
		return Device{}, false, fmt.Errorf("read backing file of %s: %w", name, err)
	}
	backing := strings.TrimSuffix(string(raw), "\n")
	backing, deleted := strings.CutSuffix(backing, deletedSuffix)
	clear, err := os.ReadFile(filepath.Join(dir, "autoclear"))
	if err != nil && !gone(err) {
		return Device{}, false, fmt.Errorf("read autoclear of %s: %w", name, err)
	}
	return Device{
		Name:      name,
		Number:    num,
		Backing:   backing,
		Deleted:   deleted,
		Autoclear: strings.TrimSpace(string(clear)) == "1",
	}, true, nil
}

// FindByBackingFile returns the live device whose backing file is path (made absolute with symlinks resolved,
// as sysfs reports it). Devices whose file has been deleted, or that are already marked to release on last
// close (which is what a forced detach of a held device leaves behind), do not count: they no longer serve the
// file under that name. With several matches the lowest-numbered device wins.
func (s Sysfs) FindByBackingFile(path string) (Device, bool, error) {
	want, err := canonicalPath(path)
	if err != nil {
		return Device{}, false, err
	}
	devs, err := s.List()
	if err != nil {
		return Device{}, false, err
	}
	for _, d := range devs {
		if d.Live() && d.Backing == want {
			return d, true, nil
		}
	}
	return Device{}, false, nil
}

// FindByBackingBase returns the live device whose backing file's base name is base ("vol-0123.img"), for
// callers that know a volume's file name but not the directory it lives in. Deleted and autoclear devices
// are ignored as in FindByBackingFile. Several live matches are an error wrapping ErrAmbiguous: the base name
// alone cannot tell which one is meant. Only devices that have a size are read (see listSized): its callers
// wait for a device that is still being bound.
func (s Sysfs) FindByBackingBase(base string) (Device, bool, error) {
	if base == "" || base == "." || base == ".." || strings.ContainsRune(base, '/') {
		return Device{}, false, fmt.Errorf("loopdev: invalid backing file name %q", base)
	}
	devs, err := s.listSized()
	if err != nil {
		return Device{}, false, err
	}
	var found []Device
	for _, d := range devs {
		if d.Live() && filepath.Base(d.Backing) == base {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 0:
		return Device{}, false, nil
	case 1:
		return found[0], true, nil
	}
	desc := make([]string, len(found))
	for i, d := range found {
		desc[i] = d.Path() + "=" + d.Backing
	}
	return Device{}, false, fmt.Errorf("%w: %s backs %s", ErrAmbiguous, base, strings.Join(desc, ", "))
}

// gone reports a sysfs read failing because the device unbound meanwhile: the attribute vanishes (ENOENT) or
// answers ENXIO/ENODEV while the kernel tears the binding down.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENXIO) || errors.Is(err, syscall.ENODEV)
}

// NumberOf returns N of a loop device path ("/dev/loopN"); ok is false for any other path.
func NumberOf(devicePath string) (n int, ok bool) {
	if !strings.HasPrefix(devicePath, "/dev/") {
		return 0, false
	}
	return loopNumber(filepath.Base(devicePath))
}

// loopNumber parses "loopN" with N in canonical decimal form; partitions ("loop0p1") and other devices are
// rejected.
func loopNumber(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "loop")
	if !ok || digits == "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
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

// BackedUnder returns the bound loop devices whose backing file lies below dir, live or not: what a run that
// keeps its files in dir has bound.
func (s Sysfs) BackedUnder(dir string) ([]Device, error) {
	devs, err := s.List()
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(filepath.Clean(dir), "/") + "/"
	return slices.DeleteFunc(devs, func(d Device) bool { return !strings.HasPrefix(d.Backing, prefix) }), nil
}
