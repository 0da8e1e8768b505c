package driver

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"golang.org/x/sys/unix"
	"slices"
	"testing"

	"github.com/diskforge/diskforge/internal/hostclean"
	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/iofaults"
)

// newFaultyNodeEnv is a node env whose volumes are served by fakecloud's fuse backend through inj, so faults
// reach the real loop devices the node stages.
func newFaultyNodeEnv(t *testing.T) (*nodeEnv, *iofaults.Injector) {
	t.Helper()
	inj := iofaults.New(iofaults.Options{})
	e := newFuseNodeEnv(t, inj)
	t.Cleanup(inj.Clear)
	return e, inj
}

// newFuseNodeEnv is a node env whose volumes are served by fakecloud's fuse backend through policy.
func newFuseNodeEnv(t *testing.T, policy fuseblock.Policy) *nodeEnv {
	t.Helper()
	testutil.SkipUnless(t, blockdev.Available(), "node tests stage real loop devices: need root and /dev/loop-control")
	testutil.SkipUnless(t, fuseblock.Available(), "the fuse backend needs /dev/fuse")
	dataDir := t.TempDir()
	// Last resort, after the backend's own Close: devices of the FUSE mount, then mounts under it.
	t.Cleanup(func() {
		if err := hostclean.ReleaseLoopsUnder(dataDir); err != nil {
			t.Logf("cleanup: %v", err)
		}
		testutil.UnmountUnder(t, dataDir)
	})
	fb, err := blockdev.NewFuseBackend(context.Background(), dataDir, blockdev.FuseOptions{Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fb.Close(); err != nil {
			t.Errorf("cleanup: close fuse backend: %v", err)
		}
	})
	// Runs before the volumes' cleanups: nothing is held while they unmount and detach.
	return newNodeEnvOn(t, NodeOptions{}, fb.LoopBackend)
}

func setFaults(t *testing.T, inj *iofaults.Injector, rules ...iofaults.Rule) {
	t.Helper()
	if err := inj.Set(rules); err != nil {
		t.Fatal(err)
	}
}

// healthReasons answers the reasons NodeGetVolumeHealth gives, of any status.
func healthReasons(t *testing.T, e *nodeEnv, id, publish, staging string) []string {
	t.Helper()
	resp, err := e.node.NodeGetVolumeHealth(context.Background(), &csi.NodeGetVolumeHealthRequest{VolumeId: id,
		VolumePublishPath: publish, StagingTargetPath: staging})
	if err != nil {
		t.Fatalf("NodeGetVolumeHealth: %v", err)
	}
	var reasons []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		t.Logf("health: %s %s: %s", h.GetStatus(), h.GetReason(), h.GetMessage())
		reasons = append(reasons, h.GetReason())
	}
	return reasons
}

// writeAndFlush writes a new file under dir, fsyncs it and syncs the whole filesystem (which commits the
// journal or log), answering the first error.
func writeAndFlush(dir, name string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(make([]byte, 64<<10))
	serr := f.Sync()
	fserr := unix.Syncfs(int(f.Fd()))
	return errors.Join(werr, serr, fserr, f.Close())
}

// TestHealthUnderIOFaults: faults injected below a staged and published volume (fakecloud's fuse backend) are
// reported abnormal by NodeGetVolumeHealth, each with its reason, and the volume still unpublishes and
// unstages. What the kernel does with a device that turned read-only: the writes land in the page cache and
// fail at writeback (fsync answers EIO); ext4's journal commit then fails, jbd2 aborts the journal and the
// next write makes ext4 remount read-only (super option emergency_ro, errors_count 1); XFS's log write fails
// and XFS shuts down, answering every operation, lstat of its root included, with EIO.
func TestHealthUnderIOFaults(t *testing.T) {
	for _, fsType := range []string{FSExt4, FSXFS} {
		t.Run(fsType, func(t *testing.T) {
			e, inj := newFaultyNodeEnv(t)
			size := ext4Size
			if fsType == FSXFS {
				size = xfsSize
			}
			id, _ := e.volume(size, nil)
			vc := mountCap(fsType, rwo)
			staging, target := e.path("staging"), e.path("target")
			e.mustStage(id, staging, vc, nil)
			e.mustPublish(id, staging, target, vc, false)
			writeFile(t, target+"/f", "data")
			if r := healthReasons(t, e, id, target, staging); len(r) != 0 {
				t.Fatalf("healthy volume: %v", r)
			}

			// Reads of the device fail: the read probe sees it.
			setFaults(t, inj, iofaults.Rule{Volume: id, Ops: []string{"read"}, Effect: iofaults.EffectError})
			if r := healthReasons(t, e, id, target, staging); !slices.Contains(r, "DeviceReadError") {
				t.Errorf("read EIO: reasons %v, want DeviceReadError", r)
			}
			inj.Clear()
			if r := healthReasons(t, e, id, target, staging); len(r) != 0 {
				t.Fatalf("after the read fault is removed: %v", r)
			}

			if fsType == FSExt4 {
				// I/O hangs: the probe gives up after its timeout (once, for one file system: it takes 5s).
				setFaults(t, inj, iofaults.Rule{Volume: id, Effect: iofaults.EffectHang})
				if r := healthReasons(t, e, id, target, staging); !slices.Contains(r, "DeviceReadError") {
					t.Errorf("hung I/O: reasons %v, want DeviceReadError", r)
				}
				inj.Clear()
			}

			// The volume turns read-only.
			setFaults(t, inj, iofaults.Rule{Volume: id, Effect: iofaults.EffectReadOnly})
			// EIO from the failed writeback, or EROFS when ext4's background journal commit failed first.
			if err := writeAndFlush(target, "g"); !errors.Is(err, unix.EIO) && !errors.Is(err, unix.EROFS) {
				t.Fatalf("write and flush on a read-only volume: %v, want EIO or EROFS", err)
			}
			want := "FilesystemShutdown"
			if fsType == FSExt4 {
				// ext4 notices the aborted journal at its next write.
				if err := writeAndFlush(target, "h"); !errors.Is(err, unix.EROFS) {
					t.Fatalf("second write on ext4 after its journal aborted: %v, want EROFS", err)
				}
				want = "FilesystemReadOnlyAfterErrors"
			}
			for _, p := range [][2]string{{target, staging}, {"", staging}} {
				if r := healthReasons(t, e, id, p[0], p[1]); !slices.Contains(r, want) {
					t.Errorf("read-only volume at %q: reasons %v, want %s", p, r, want)
				}
			}
			inj.Clear()
			e.mustUnpublish(id, target)
			e.mustUnstage(id, staging)
		})
	}
}

// TestHealthSuperblockTurnedReadOnly: kernels before ext4's emergency_ro flag remount the superblock read-only
// after errors while the mount still says rw; a volume staged read-only on both levels is not abnormal.
func TestHealthSuperblockTurnedReadOnly(t *testing.T) {
	const vol = "vol-00000000000000e01"
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"staged rw", nil, []string{"FilesystemReadOnlyAfterErrors"}},
		{"staged ro", []string{"ro"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeMachine(t)
			d := m.loopVolume(vol, 1, 64*mib)
			m.write(d, FSExt4, 0)
			e := newFakeEnv(t, m)
			staging := e.path("staging")
			e.mustStage(vol, staging, mountCap(FSExt4, rwo, tc.flags...), nil)
			if r := healthReasons(t, e, vol, "", staging); len(r) != 0 {
				t.Fatalf("freshly staged: %v", r)
			}
			real, err := filepath.EvalSymlinks(staging)
			must(t, err)
			m.mu.Lock()
			for _, fm := range m.table {
				if fm.info.Mountpoint == real {
					fm.info.VFSOptions = "ro,errors=remount-ro"
				}
			}
			m.mu.Unlock()
			if r := healthReasons(t, e, vol, "", staging); !slices.Equal(r, tc.want) {
				t.Fatalf("superblock read-only: reasons %v, want %v", r, tc.want)
			}
		})
	}
}
