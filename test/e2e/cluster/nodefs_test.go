package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/diskforge/diskforge/internal/testutil"
)

func TestVolumeFilesystems(t *testing.T) {
	mounts := []*mountinfo.Info{
		{Mountpoint: "/var/lib/kubelet/plugins/kubernetes.io/csi/disk.csi.diskforge.io/abc/globalmount", Source: "/dev/loop3",
			FSType: "ext4", Major: 7, Minor: 3},
		{Mountpoint: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pvc-1/mount", Source: "/dev/loop3",
			FSType: "ext4", Major: 7, Minor: 3},
		{Mountpoint: "/var/lib/kubelet/pods/uid-2/volumes/kubernetes.io~csi/pvc-2/mount", Source: "/dev/loop4",
			FSType: "xfs", Major: 7, Minor: 4},
		{Mountpoint: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~projected/token", Source: "tmpfs",
			FSType: "tmpfs", Major: 0, Minor: 91},
		{Mountpoint: "/var/lib/kubelet/pods/uid-3/volumes/kubernetes.io~csi/pvc-3/mount", Source: "/dev/loop5",
			FSType: "btrfs", Major: 7, Minor: 5},
	}
	got := volumeFilesystems(mounts)
	want := []string{mounts[0].Mountpoint, mounts[2].Mountpoint}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("volumeFilesystems = %q, want one mount point per ext4/xfs device: %q", got, want)
	}
	for path, under := range map[string]bool{
		"/var/lib/kubelet/pods/x/volumes": true, "/var/lib/kubelet/plugins/x": true, "/var/lib/kubelet": false,
		"/var/lib/kubelet/pods": false, "/var/lib/kubeletx/pods/x": false, "/var/lib/kubelet/plugins_registry/x": false,
	} {
		if underVolumeDirs(path) != under {
			t.Errorf("underVolumeDirs(%q) = %t, want %t", path, !under, under)
		}
	}
}

// TestShutdownFS: after the shutdown, the filesystem neither takes writes nor flushes what it had: a file written
// and synced before is on the disk, one written after it is not.
func TestShutdownFS(t *testing.T) {
	testutil.RequireRoot(t, "loop devices and mounts")
	testutil.RequireTools(t, "losetup", "mkfs.ext4", "mount", "umount", "debugfs")
	dir := t.TempDir()
	dev := testutil.LoopDevice(t, dir, 64<<20, 512, nil)
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// No periodic journal commit during the test: what reaches the journal is what was synced.
	if out, err := exec.Command("mount", "-o", "commit=300", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	synced := filepath.Join(mnt, "synced")
	f, err := os.Create(synced)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("kept"); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	unsynced := filepath.Join(mnt, "unsynced")
	if err := os.WriteFile(unsynced, []byte("lost"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := shutdownFS(mnt); err != nil {
		t.Fatal(err)
	}
	if err := shutdownFS(mnt); err != nil {
		t.Errorf("a second shutdown: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644); !errors.Is(err, syscall.EIO) {
		t.Errorf("write after the shutdown: %v, want EIO", err)
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount of a shut down filesystem: %v: %s", err, out)
	}
	out, err := exec.Command("debugfs", "-R", "ls -l /", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs: %v: %s", err, out)
	}
	// The journal was not replayed: debugfs reads what reached the device. The synced file's entry is committed in
	// the journal; the unsynced one's never reached it.
	if strings.Contains(string(out), "unsynced") {
		t.Errorf("the unsynced file reached the device after the shutdown:\n%s", out)
	}
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount again: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("umount", mnt).Run() }()
	if got, err := os.ReadFile(synced); err != nil || string(got) != "kept" {
		t.Errorf("synced file after the crash: %q, %v; want kept", got, err)
	}
	if _, err := os.Stat(unsynced); err == nil {
		t.Error("the unsynced file survived the crash")
	}
}
