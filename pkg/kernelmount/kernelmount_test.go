package kernelmount

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"k8s.io/mount-utils"

	"github.com/diskforge/diskforge/internal/testutil"
)

func TestDirect(t *testing.T) {
	tests := []struct {
		fstype  string
		options []string
		want    bool
	}{
		{"ext4", nil, true},
		{"ext4", []string{"defaults"}, true},
		{"xfs", []string{"nouuid", "defaults"}, true},
		{"ext4", []string{"ro", "noatime", "nodev", "nosuid", "errors=remount-ro", "data=ordered", "discard"}, true},
		{"ext3", []string{"rw"}, true},
		{"", []string{"bind"}, true},
		{"", []string{"bind", "ro"}, true},
		{"none", []string{"bind", "rw", "defaults"}, true},
		// a bind's other flags need a remount that moby/sys/mount does only for ro
		{"", []string{"bind", "nosuid"}, false},
		{"", []string{"bind", "ro", "noexec"}, false},
		{"ext4", []string{"bind"}, false},
		{"", []string{"rbind"}, false},
		// userspace options: mount(8) acts on them or keeps them in utab
		{"ext4", []string{"_netdev"}, false},
		{"ext4", []string{"nofail"}, false},
		{"ext4", []string{"x-kubernetes.io=1"}, false},
		{"ext4", []string{"X-mount.mkdir"}, false},
		{"ext4", []string{"comment=fstab"}, false},
		{"ext4", []string{"loop"}, false},
		{"ext4", []string{"verity.roothash=ab"}, false},
		// flags mount(8) turns into mount(2) flags and moby/sys/mount would pass on as data
		{"ext4", []string{"lazytime"}, false},
		{"ext4", []string{"nosymfollow"}, false},
		{"xfs", []string{"context=system_u:object_r:container_file_t:s0"}, false},
		// SELinux contexts: libmount translates them to raw contexts, and drops them where SELinux is off
		{"ext4", []string{`context="system_u:object_r:container_file_t:s0:c0,c1"`}, false},
		{"ext4", []string{"noatime", `fscontext="system_u:object_r:container_file_t:s0:c0,c1"`}, false},
		{"xfs", []string{"defcontext=system_u:object_r:container_file_t:s0"}, false},
		{"ext4", []string{"rootcontext=system_u:object_r:container_file_t:s0"}, false},
		{"", []string{"bind", `context="system_u:object_r:container_file_t:s0:c0,c1"`}, false},
		// not a plain mount, or not an option at all
		{"ext4", []string{"remount", "ro"}, false},
		{"ext4", []string{"shared"}, false},
		{"ext4", []string{""}, false},
		{"ext4", []string{"ro=1"}, false},
		{"ext4", []string{"noatime,nodev"}, false},
		{"ext4", []string{"a\x00b"}, false},
		// other filesystems may need a helper (mount.nfs, mount.fuse...) or are not on a block device
		{"nfs", nil, false},
		{"tmpfs", []string{"size=1m"}, false},
		{"btrfs", nil, false},
	}
	for _, tc := range tests {
		if got := Direct(tc.fstype, tc.options); got != tc.want {
			t.Errorf("Direct(%q, %q) = %v; want %v", tc.fstype, tc.options, got, tc.want)
		}
	}
}

// TestFallback: what Direct refuses, and every mount with sensitive options, goes to the wrapped Interface.
func TestFallback(t *testing.T) {
	fake := mount.NewFakeMounter(nil)
	m := New(fake)
	dir := t.TempDir()
	calls := []struct {
		fstype             string
		options, sensitive []string
	}{
		{"ext4", []string{"_netdev"}, nil},
		{"ext4", nil, []string{"secret"}},
		{"", []string{"bind", "nosuid"}, nil},
		{"nfs", nil, nil},
	}
	for i, c := range calls {
		if err := m.MountSensitive("/dev/null", filepath.Join(dir, "t", string(rune('a'+i))), c.fstype, c.options, c.sensitive); err != nil {
			t.Fatalf("MountSensitive %+v: %v", c, err)
		}
	}
	if err := m.Mount("/dev/null", filepath.Join(dir, "m"), "tmpfs", nil); err != nil {
		t.Fatal(err)
	}
	if got := len(fake.GetLog()); got != len(calls)+1 {
		t.Fatalf("the fallback saw %d mounts, want %d: %+v", got, len(calls)+1, fake.GetLog())
	}
}

// TestSELinuxContextsReachMount8: the SELinux context options kubelet passes (quoted, a comma inside the
// quotes) reach the fallback, mount(8), as one option each, unchanged: mount-utils joins the options with
// commas into one -o argument, which libmount splits outside quotes. A real mount with them is not tested:
// it needs a host with SELinux on (elsewhere mount(8) drops them and mount(2) refuses them).
func TestSELinuxContextsReachMount8(t *testing.T) {
	for _, opts := range [][]string{
		{`context="system_u:object_r:container_file_t:s0:c0,c1"`},
		{"noatime", `context="system_u:object_r:container_file_t:s0:c0,c1"`, "defaults"},
		{`fscontext="system_u:object_r:container_file_t:s0:c0,c1"`, "rootcontext=system_u:object_r:container_file_t:s0"},
		{"nouuid", "defcontext=system_u:object_r:container_file_t:s0"},
	} {
		fake := mount.NewFakeMounter(nil)
		target := filepath.Join(t.TempDir(), "mnt")
		if err := New(fake).Mount("/dev/null", target, "ext4", slices.Clone(opts)); err != nil {
			t.Fatalf("Mount %q: %v", opts, err)
		}
		if len(fake.MountPoints) != 1 || !slices.Equal(fake.MountPoints[0].Opts, opts) {
			t.Errorf("mount(8) was given %+v, want the options %q", fake.MountPoints, opts)
		}
	}
}

// loopDevice binds a loop device to a sparse file of size bytes in dir, formatted with mkfs when set.
func loopDevice(t *testing.T, dir string, size int64, mkfs ...string) string {
	t.Helper()
	return testutil.LoopDevice(t, dir, size, 512, func(file string) {
		if len(mkfs) == 0 {
			return
		}
		if out, err := exec.Command(mkfs[0], append(mkfs[1:], file)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", mkfs, err, out)
		}
	})
}

func mountAt(t *testing.T, target string) *mountinfo.Info {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) == 0 {
		return nil
	}
	return infos[len(infos)-1]
}

func hasOption(list, o string) bool { return slices.Contains(strings.Split(list, ","), o) }

// TestMountsDirectly mounts filesystems and binds with mount(2), as mount(8) would: the options become the
// mount's flags and the filesystem's own options, and the fallback is never asked.
func TestMountsDirectly(t *testing.T) {
	testutil.RequireRoot(t, "mounting needs root")
	testutil.RequireTools(t, "losetup", "mkfs.ext4", "mkfs.xfs")
	tests := []struct {
		name    string
		mkfs    []string
		size    int64
		fstype  string
		options []string
		// per-mount and filesystem options the mount must show
		mountOpts, superOpts []string
	}{
		{"ext4", []string{"mkfs.ext4", "-q", "-F"}, 64 << 20, "ext4", []string{"defaults"}, []string{"rw"}, nil},
		{"ext4 flags and data", []string{"mkfs.ext4", "-q", "-F"}, 64 << 20, "ext4",
			[]string{"ro", "noatime", "nodev", "errors=remount-ro"}, []string{"ro", "noatime", "nodev"}, []string{"errors=remount-ro"}},
		{"xfs nouuid", []string{"mkfs.xfs", "-q", "-f"}, 320 << 20, "xfs", []string{"nouuid", "defaults"}, []string{"rw"}, []string{"nouuid"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := loopDevice(t, dir, tc.size, tc.mkfs...)
			target := filepath.Join(dir, "mnt")
			if err := os.Mkdir(target, 0o750); err != nil {
				t.Fatal(err)
			}
			fake := mount.NewFakeMounter(nil)
			if err := New(fake).MountSensitive(dev, target, tc.fstype, tc.options, nil); err != nil {
				t.Fatal(err)
			}
			if len(fake.GetLog()) != 0 {
				t.Fatalf("the fallback was asked: %+v", fake.GetLog())
			}
			mi := mountAt(t, target)
			if mi == nil || mi.Source != dev || mi.FSType != tc.fstype {
				t.Fatalf("mount at %s = %+v; want %s of %s", target, mi, tc.fstype, dev)
			}
			for _, o := range tc.mountOpts {
				if !hasOption(mi.Options, o) {
					t.Errorf("mount options %q lack %q", mi.Options, o)
				}
			}
			for _, o := range tc.superOpts {
				if !hasOption(mi.VFSOptions, o) {
					t.Errorf("filesystem options %q lack %q", mi.VFSOptions, o)
				}
			}
		})
	}

	t.Run("read-only bind", func(t *testing.T) {
		dir := t.TempDir()
		t.Cleanup(func() { testutil.UnmountUnder(t, dir) })
		source, target := filepath.Join(dir, "source"), filepath.Join(dir, "target")
		for _, d := range []string{source, target} {
			if err := os.Mkdir(d, 0o750); err != nil {
				t.Fatal(err)
			}
		}
		fake := mount.NewFakeMounter(nil)
		if err := New(fake).Mount(source, target, "", []string{"bind", "ro"}); err != nil {
			t.Fatal(err)
		}
		mi := mountAt(t, target)
		if mi == nil || !hasOption(mi.Options, "ro") || len(fake.GetLog()) != 0 {
			t.Fatalf("bind at %s = %+v (fallback log %+v); want a read-only bind by mount(2)", target, mi, fake.GetLog())
		}
		if err := os.WriteFile(filepath.Join(target, "f"), nil, 0o600); !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing through the read-only bind: %v; want EROFS", err)
		}
	})

	t.Run("no filesystem", func(t *testing.T) {
		dir := t.TempDir()
		dev := loopDevice(t, dir, 64<<20)
		target := filepath.Join(dir, "mnt")
		if err := os.Mkdir(target, 0o750); err != nil {
			t.Fatal(err)
		}
		err := New(mount.NewFakeMounter(nil)).MountSensitive(dev, target, "ext4", nil, nil)
		if !errors.Is(err, syscall.EINVAL) || mountAt(t, target) != nil {
			t.Fatalf("mounting a blank device as ext4: %v; want EINVAL and no mount", err)
		}
	})
}
