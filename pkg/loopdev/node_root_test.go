// The tests here make device nodes (root) and sit outside package loopdev so that they can use testutil, which
// imports loopdev through hostclean.
package loopdev_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// TestEnsureDeviceNode creates nodes in a scratch directory, so no real device node is touched. The numbers
// come from a fake sysfs and deliberately differ from 7:N, as with max_part.
func TestEnsureDeviceNode(t *testing.T) {
	testutil.RequireRoot(t, "mknod needs root")
	sys := loopdev.FakeSysfs(t, map[string]loopdev.FakeDev{
		"loop3": {Backing: "/v/a.img", Dev: "7:48"},
		"loop4": {Backing: "/v/b.img"}, // no dev attribute
	})
	devDir := t.TempDir()
	d := loopdev.Device{Name: "loop3", Number: 3}
	for range 2 { // the second call finds the node and does nothing
		node, err := sys.EnsureDeviceNode(d, devDir)
		if err != nil {
			t.Fatalf("EnsureDeviceNode: %v", err)
		}
		if want := filepath.Join(devDir, "loop3"); node != want {
			t.Fatalf("EnsureDeviceNode = %q, want %q", node, want)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(devDir, "loop3"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != 7 || unix.Minor(st.Rdev) != 48 {
		t.Fatalf("node mode %o rdev %d:%d, want block 7:48", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}

	// An existing entry is returned as it is, even when sysfs could not describe the device.
	existing := filepath.Join(devDir, "loop4")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if node, err := sys.EnsureDeviceNode(loopdev.Device{Name: "loop4", Number: 4}, devDir); err != nil || node != existing {
		t.Fatalf("EnsureDeviceNode with an existing entry = %q, %v", node, err)
	}

	// Without sysfs numbers no node is guessed.
	if _, err := sys.EnsureDeviceNode(loopdev.Device{Name: "loop4", Number: 4}, t.TempDir()); err == nil {
		t.Fatal("EnsureDeviceNode without a sysfs dev attribute succeeded")
	}
	if _, err := sys.EnsureDeviceNode(loopdev.Device{Name: "../loop3"}, devDir); err == nil {
		t.Fatal("EnsureDeviceNode accepted a path as device name")
	}
	if _, err := sys.EnsureDeviceNode(d, filepath.Join(devDir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("EnsureDeviceNode into a missing directory: err = %v, want not exist", err)
	}
}

// TestEnsureDeviceNodeHost checks the real sysfs against what the kernel put in /dev: for every loop device
// (bound or not) that has a node, a node created from the sysfs numbers gets the same rdev.
func TestEnsureDeviceNodeHost(t *testing.T) {
	testutil.RequireRoot(t, "mknod needs root")
	entries, err := os.ReadDir(loopdev.DefaultRoot)
	testutil.SkipUnless(t, err, "the host's sysfs is needed")
	var sys loopdev.Sysfs
	devDir := t.TempDir()
	checked := 0
	for _, e := range entries {
		d := loopdev.Device{Name: e.Name()}
		if _, ok := loopdev.LoopNumber(d.Name); !ok {
			continue
		}
		var real unix.Stat_t
		if unix.Stat(d.Path(), &real) != nil {
			continue
		}
		node, err := sys.EnsureDeviceNode(d, devDir)
		if err != nil {
			t.Fatalf("EnsureDeviceNode(%s): %v", d.Name, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(node, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != real.Rdev {
			t.Errorf("%s: created mode %o rdev %d:%d, /dev has %d:%d", d.Name, st.Mode, unix.Major(st.Rdev),
				unix.Minor(st.Rdev), unix.Major(real.Rdev), unix.Minor(real.Rdev))
		}
		checked++
	}
	if checked == 0 {
		testutil.SkipUnless(t, errors.New("none found"), "a loop device with a /dev node is needed to compare with")
	}
}
