package loopdev_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// TestEnsureFreeNodes makes the nodes in a scratch directory from a fake sysfs, so no real device node is touched.
func TestEnsureFreeNodes(t *testing.T) {
	testutil.RequireRoot(t, "mknod needs root")
	type node struct {
		kind         uint32
		major, minor uint32
	}
	for _, tc := range []struct {
		name     string
		devs     map[string]loopdev.FakeDev
		existing []string // regular files already in /dev, left as they are
		spare    int
		want     map[string]node // every entry of /dev afterwards, but the existing ones
	}{
		{
			name:  "no loop devices yet",
			devs:  map[string]loopdev.FakeDev{},
			spare: 2,
			want: map[string]node{"loop-control": {unix.S_IFCHR, 10, 237},
				"loop0": {unix.S_IFBLK, 7, 0}, "loop1": {unix.S_IFBLK, 7, 1}},
		},
		{
			name: "the stride of max_part, beyond the highest device, an entry already there",
			devs: map[string]loopdev.FakeDev{"loop0": {Dev: "7:0"}, "loop1": {Dev: "7:16"}, "loop3": {},
				"ram0": {Dev: "1:0"}},
			existing: []string{"loop1", "loop-control"},
			spare:    2,
			want: map[string]node{"loop0": {unix.S_IFBLK, 7, 0}, "loop2": {unix.S_IFBLK, 7, 32},
				"loop3": {unix.S_IFBLK, 7, 48}, "loop4": {unix.S_IFBLK, 7, 64}, "loop5": {unix.S_IFBLK, 7, 80}},
		},
		{
			name:  "no numbers in sysfs: stride 1",
			devs:  map[string]loopdev.FakeDev{"loop0": {}, "loop1": {}},
			spare: 0,
			want: map[string]node{"loop-control": {unix.S_IFCHR, 10, 237},
				"loop0": {unix.S_IFBLK, 7, 0}, "loop1": {unix.S_IFBLK, 7, 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := loopdev.FakeSysfs(t, tc.devs)
			dev := t.TempDir()
			for _, name := range tc.existing {
				if err := os.WriteFile(filepath.Join(dev, name), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			made, err := sys.EnsureFreeNodes(dev, tc.spare)
			if err != nil {
				t.Fatalf("EnsureFreeNodes: %v", err)
			}
			if made != len(tc.want) {
				t.Errorf("EnsureFreeNodes made %d nodes, want %d", made, len(tc.want))
			}
			entries, err := os.ReadDir(dev)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(tc.want)+len(tc.existing) {
				t.Errorf("/dev holds %d entries, want %d", len(entries), len(tc.want)+len(tc.existing))
			}
			for name, w := range tc.want {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(dev, name), &st); err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				got := node{st.Mode & unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev)}
				if got != w || st.Mode&0o777 != 0o660 {
					t.Errorf("%s: %s mode %o, want %s", name, fmtNode(got.kind, got.major, got.minor), st.Mode&0o777, fmtNode(w.kind, w.major, w.minor))
				}
			}
			for _, name := range tc.existing {
				if fi, err := os.Lstat(filepath.Join(dev, name)); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s was replaced (%v)", name, err)
				}
			}
			// A second pass finds everything there.
			if made, err := sys.EnsureFreeNodes(dev, tc.spare); err != nil || made != 0 {
				t.Errorf("second EnsureFreeNodes = %d, %v; want 0, nil", made, err)
			}
		})
	}
}

func fmtNode(kind, major, minor uint32) string {
	k := "block"
	if kind == unix.S_IFCHR {
		k = "char"
	}
	return fmt.Sprintf("%s %d:%d", k, major, minor)
}

// TestEnsureFreeNodesRefuses checks the inputs EnsureFreeNodes turns down without making anything.
func TestEnsureFreeNodesRefuses(t *testing.T) {
	sys := loopdev.FakeSysfs(t, map[string]loopdev.FakeDev{})
	if _, err := sys.EnsureFreeNodes(t.TempDir(), -1); err == nil {
		t.Error("EnsureFreeNodes with spare -1 succeeded")
	}
	missing := loopdev.Sysfs{Root: filepath.Join(t.TempDir(), "missing")}
	if _, err := missing.EnsureFreeNodes(t.TempDir(), 1); err == nil {
		t.Error("EnsureFreeNodes without a sysfs succeeded")
	}
}
