// Package fuseblocktest serves volume files through a real fuseblock mount for the tests of policies, so that
// they see requests (and deletions) the way the fuse backend sends them, without loop devices.
package fuseblocktest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// suffix ends the served names, as the fuse backend's do.
const suffix = ".img"

// Mount is a served directory of volume files.
type Mount struct {
	t   testing.TB
	dir string
	FS  *fuseblock.FS
}

// Serve mounts a fuseblock filesystem with policy on a temporary directory; it skips without root or
// /dev/fuse. At cleanup, also when the test failed, it unmounts.
func Serve(t testing.TB, policy fuseblock.Policy) *Mount {
	t.Helper()
	testutil.RequireRoot(t, "mounting FUSE needs root")
	testutil.SkipUnless(t, fuseblock.Available(), "serving FUSE needs /dev/fuse")
	dir, mnt := t.TempDir(), t.TempDir()
	fsys, err := fuseblock.Mount(fuseblock.Config{Dir: dir, Suffix: suffix, MountPoint: mnt, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		testutil.UnmountUnder(t, mnt)
	})
	return &Mount{t: t, dir: dir, FS: fsys}
}

// Create makes a sparse volume file of size bytes.
func (m *Mount) Create(volumeID string, size int64) {
	m.t.Helper()
	f, err := os.OpenFile(filepath.Join(m.dir, volumeID+suffix), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		m.t.Fatal(err)
	}
}

// Read reads n bytes at off of the volume through the mount.
func (m *Mount) Read(volumeID string, off int64, n int) {
	m.t.Helper()
	f, err := os.Open(m.FS.Path(volumeID))
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, n), off); err != nil {
		m.t.Fatalf("read %s at %d: %v", volumeID, off, err)
	}
}

// Delete removes the volume file and tells the mount, as the fuse backend's DeleteVolume does.
func (m *Mount) Delete(volumeID string) {
	m.t.Helper()
	if err := os.Remove(filepath.Join(m.dir, volumeID+suffix)); err != nil {
		m.t.Fatal(err)
	}
	m.FS.Forget(volumeID)
}
