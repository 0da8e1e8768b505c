package loopdev

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestDevNumbers(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop0": {dev: "7:0"},
		"loop3": {dev: "7:48"}, // max_part=15: minors step by 16
		"loop4": {dev: "259:12"},
		"loop5": {dev: "7"},
		"loop6": {dev: "7:x"},
		"loop7": {},
	})
	tests := []struct {
		name         string
		major, minor uint32
		wantErr      bool
	}{
		{"loop0", 7, 0, false},
		{"loop3", 7, 48, false},
		{"loop4", 259, 12, false},
		{"loop5", 0, 0, true},
		{"loop6", 0, 0, true},
		{"loop7", 0, 0, true},
		{"loop9", 0, 0, true},
		{"../loop0", 0, 0, true},
	}
	for _, tc := range tests {
		ma, mi, err := sys.DevNumbers(Device{Name: tc.name})
		if (err != nil) != tc.wantErr || ma != tc.major || mi != tc.minor {
			t.Errorf("DevNumbers(%s) = %d:%d, %v; want %d:%d, error %v", tc.name, ma, mi, err, tc.major, tc.minor,
				tc.wantErr)
		}
	}
}

// TestEnsureDeviceNode creates nodes in a scratch directory, so no real device node is touched. The numbers
// come from a fake sysfs and deliberately differ from 7:N, as with max_part.
func TestEnsureDeviceNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop3": {backing: "/v/a.img", dev: "7:48"},
		"loop4": {backing: "/v/b.img"}, // no dev attribute
	})
	devDir := t.TempDir()
	d := Device{Name: "loop3", Number: 3}
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
	if node, err := sys.EnsureDeviceNode(Device{Name: "loop4", Number: 4}, devDir); err != nil || node != existing {
		t.Fatalf("EnsureDeviceNode with an existing entry = %q, %v", node, err)
	}

	// Without sysfs numbers no node is guessed.
	if _, err := sys.EnsureDeviceNode(Device{Name: "loop4", Number: 4}, t.TempDir()); err == nil {
		t.Fatal("EnsureDeviceNode without a sysfs dev attribute succeeded")
	}
	if _, err := sys.EnsureDeviceNode(Device{Name: "../loop3"}, devDir); err == nil {
		t.Fatal("EnsureDeviceNode accepted a path as device name")
	}
	if _, err := sys.EnsureDeviceNode(d, filepath.Join(devDir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("EnsureDeviceNode into a missing directory: err = %v, want not exist", err)
	}
}

// TestEnsureDeviceNodeHost checks the real sysfs against what the kernel put in /dev: for every loop device
// (bound or not) that has a node, a node created from the sysfs numbers gets the same rdev.
func TestEnsureDeviceNodeHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	entries, err := os.ReadDir(DefaultRoot)
	if err != nil {
		t.Skipf("no sysfs: %v", err)
	}
	var sys Sysfs
	devDir := t.TempDir()
	checked := 0
	for _, e := range entries {
		d := Device{Name: e.Name()}
		if _, ok := loopNumber(d.Name); !ok {
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
		t.Skip("no loop device with a /dev node to compare with")
	}
}
