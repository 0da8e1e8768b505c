package fakecloud_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/hostclean"
	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// reflinkDir mounts a fresh XFS with reflink on a loop device over a sparse image the test makes (both go at
// cleanup) and returns a directory on it.
func reflinkDir(t *testing.T) string {
	t.Helper()
	requireLoop(t)
	testutil.RequireTools(t, "mkfs.xfs")
	base := t.TempDir()
	dev := testutil.LoopDevice(t, base, 1<<30, 512, func(file string) {
		if out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", file).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.xfs: %v: %s", err, out)
		}
	})
	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dev, mnt, "xfs", 0, ""); err != nil {
		t.Fatalf("mount %s: %v", dev, err)
	}
	return filepath.Join(mnt, "data")
}

// busyWorkers keeps every block I/O worker of the cloud on a volume deletion held at hooks' gate, as eight long
// copies would: nothing else gets a worker until the gate opens.
func busyWorkers(t *testing.T, c *ec2.Client, hooks *hookedBackend) {
	t.Helper()
	for range 8 {
		vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
		if _, err := c.DeleteVolume(context.Background(), &ec2.DeleteVolumeInput{VolumeId: &vol}); err != nil {
			t.Fatal(err)
		}
		hooks.deletes.await(t)
	}
}

// TestSnapshotHoldsTheInstantOfItsRequest reproduces the review: with the eight workers busy, a
// snapshot of an attached volume is asked for, and a write made through its loop device after the reply must
// not be in the snapshot. On the fuse backend the copy-on-write barrier is taken before the reply; on a
// filesystem with reflink (an XFS image) the volume's file is cloned before the reply, on both backends. The
// same holds for a CopyVolumes of the attached volume. Each case logs how long CreateSnapshot took to answer.
func TestSnapshotHoldsTheInstantOfItsRequest(t *testing.T) {
	for _, tc := range []struct {
		name, backend string
		reflink       bool
	}{
		{"fuse", fakecloud.BackendFuse, false},
		{"fuse on reflink", fakecloud.BackendFuse, true},
		{"loop on reflink", fakecloud.BackendLoop, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hooks := &hookedBackend{deletes: newGate(t)}
			env := startLoopCloud(t, tc.backend, func(o *fakecloudtest.Options) {
				o.WrapBackend = hooks.wrap
				if tc.reflink {
					o.DataDir = reflinkDir(t)
				}
			})
			c := env.EC2(t)
			ctx := context.Background()
			vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
			attached(t, c, vol, env.Instances[zoneA], "/dev/xvdba")
			dev := env.Server.Backend.DevicePath(vol)
			busyWorkers(t, c, hooks)
			const off = 5 << 20
			before := bytes.Repeat([]byte("before the request "), 4096)
			after := bytes.Repeat([]byte("AFTER THE REPLY -- "), 4096)
			writeAt(t, dev, before, off)

			start := time.Now()
			out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("CreateSnapshot of the attached volume answered in %v", time.Since(start))
			cp, err := c.CopyVolumes(ctx, &ec2.CopyVolumesInput{SourceVolumeId: &vol})
			if err != nil {
				t.Fatal(err)
			}
			copyID := aws.ToString(cp.Volumes[0].VolumeId)
			time.Sleep(300 * time.Millisecond)
			writeAt(t, dev, after, off)

			hooks.deletes.release()
			snap := aws.ToString(out.SnapshotId)
			waitSnapshot(t, c, snap, types.SnapshotStateCompleted)
			waitVolume(t, c, copyID, types.VolumeStateAvailable)
			for what, file := range map[string]string{
				"snapshot": filepath.Join(env.DataDir, "snapshots", snap+".img"),
				"copy":     env.Server.Backend.VolumeFile(copyID),
			} {
				got := readAt(t, file, len(before), off)
				switch {
				case bytes.Equal(got, after):
					t.Errorf("the %s holds a write made after its request was answered", what)
				case !bytes.Equal(got, before):
					t.Errorf("the %s does not hold the volume's bytes at its request", what)
				}
			}
		})
	}
}

// TestSnapshotOfVolumeWithoutDeviceWaitsForItsCopy: a detached volume with a snapshot not yet copied is not
// attached (so nothing writes into the snapshot's source) until the copy is done.
func TestSnapshotOfVolumeWithoutDeviceWaitsForItsCopy(t *testing.T) {
	hooks := &hookedBackend{copies: newGate(t)}
	env := startLoopCloud(t, fakecloud.BackendLoop, func(o *fakecloudtest.Options) { o.WrapBackend = hooks.wrap })
	c := env.EC2(t)
	ctx := context.Background()
	vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
	out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
	if err != nil {
		t.Fatal(err)
	}
	hooks.copies.await(t)
	if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: aws.String(env.Instances[zoneA]),
		Device: aws.String("/dev/xvdba")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if dev := env.Server.Backend.DevicePath(vol); dev != "" {
		t.Fatalf("the volume got device %s while its snapshot's copy was pending", dev)
	}
	hooks.copies.release()
	waitSnapshot(t, c, aws.ToString(out.SnapshotId), types.SnapshotStateCompleted)
	waitAttachment(t, c, vol, types.VolumeAttachmentStateAttached)
}

// TestHungFlushFailsTheSnapshot: nine attached volumes on the fuse backend whose fsyncs hang (an I/O fault)
// are snapshotted. Each flush is bounded: the snapshots go to error with a statusMessage, and meanwhile the
// attach, detach and delete of another volume complete; no worker is pinned.
func TestHungFlushFailsTheSnapshot(t *testing.T) {
	env := startLoopCloud(t, fakecloud.BackendFuse)
	t.Cleanup(env.Server.IOFaults.Clear)
	c := env.EC2(t)
	ctx := context.Background()
	var vols, rules []string
	for i := range 9 {
		vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
		attached(t, c, vol, env.Instances[zoneA], fmt.Sprintf("/dev/xvdb%c", 'a'+i))
		vols = append(vols, vol)
		rules = append(rules, fmt.Sprintf(`{"volume":%q,"ops":["fsync"],"effect":"hang"}`, vol))
	}
	putIOFaults(t, env, strings.Join(rules, ","))

	snaps := make([]string, len(vols))
	var wg sync.WaitGroup
	for i, vol := range vols {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
			if err != nil {
				t.Errorf("CreateSnapshot %s: %v", vol, err)
				return
			}
			snaps[i] = aws.ToString(out.SnapshotId)
		}()
	}

	// Meanwhile another volume's life goes on.
	start := time.Now()
	other := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
	attached(t, c, other, env.Instances[zoneA], "/dev/xvdca")
	if _, err := c.DetachVolume(ctx, &ec2.DetachVolumeInput{VolumeId: &other}); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, other)
	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &other}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, other)
	t.Logf("attach, detach and delete of another volume took %v", time.Since(start))

	wg.Wait()
	for _, snap := range snaps {
		if snap == "" {
			continue
		}
		got := waitSnapshot(t, c, snap, types.SnapshotStateError)
		if aws.ToString(got.StateMessage) == "" {
			t.Errorf("snapshot %s is in error without a statusMessage", snap)
		}
	}
	t.Logf("snapshot of a volume whose flush hangs: %q", aws.ToString(describeSnapshotT(t, c, snaps[0]).StateMessage))
}

func describeSnapshotT(t *testing.T, c *ec2.Client, id string) types.Snapshot {
	t.Helper()
	out, err := c.DescribeSnapshots(context.Background(), &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
	if err != nil || len(out.Snapshots) != 1 {
		t.Fatalf("describe %s: %v", id, err)
	}
	return out.Snapshots[0]
}

// snapshotCrashDirEnv names the data directory TestSnapshotCrashHelper serves.
const snapshotCrashDirEnv = "FAKECLOUD_SNAPSHOT_CRASH_DIR"

// TestSnapshotCrashHelper is not a test: TestSnapshotCutShortByKill runs the test binary with it, as a
// fakecloud on the fuse backend whose snapshot copies never finish (a long copy), and kills it.
func TestSnapshotCrashHelper(t *testing.T) {
	dir := os.Getenv(snapshotCrashDirEnv)
	if dir == "" {
		return
	}
	hooks := &hookedBackend{copies: newGate(t)}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Backend: fakecloud.BackendFuse, DataDir: dir, WrapBackend: hooks.wrap})
	fmt.Printf("URL %s\n", env.URL)
	select {}
}

// hostDevice is the loop device bound to the volume's FUSE file under dataDir.
func hostDevice(t *testing.T, dataDir, volumeID string) string {
	t.Helper()
	var dev string
	fakecloudtest.WaitFor(t, 10*time.Second, "device of "+volumeID, func(context.Context) (bool, error) {
		devs, err := loopdev.Sysfs{}.BackedUnder(dataDir)
		for _, d := range devs {
			if d.Live() && d.Backing == filepath.Join(dataDir, "fuse", volumeID+".img") {
				dev = d.Path()
			}
		}
		return dev != "", err
	})
	return dev
}

// TestSnapshotCutShortByKill: CreateSnapshot of an attached volume on the fuse backend is answered (pending),
// 256 MiB are written over the volume, and fakecloud is killed with SIGKILL while the copy runs. After the
// restart the snapshot never holds a later instant: it is in error with a statusMessage where the instant was
// only in the dead process's copy-on-write session, and completed with the bytes of its request where the
// instant was a reflink made before the reply. The kill leaves nothing leaked or duplicated: one live mount
// (the new server's), one live loop device (the volume's, bound again), one snapshot, no snapshot file or
// temporary file without a completed snapshot.
func TestSnapshotCutShortByKill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reflink bool
	}{{"copy-on-write", false}, {"reflink", true}} {
		t.Run(tc.name, func(t *testing.T) {
			requireLoop(t)
			testutil.SkipUnless(t, fuseblock.Available(), "fuse backend needs /dev/fuse")
			dir := t.TempDir()
			if tc.reflink {
				dir = reflinkDir(t)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if resolved, err := filepath.EvalSymlinks(dir); err == nil {
				dir = resolved
			}
			t.Cleanup(func() {
				if err := hostclean.ReleaseLoopsUnder(dir); err != nil {
					t.Logf("cleanup: %v", err)
				}
				testutil.UnmountUnder(t, dir)
			})
			cmd := exec.Command(os.Args[0], "-test.run=^TestSnapshotCrashHelper$")
			cmd.Env = append(os.Environ(), snapshotCrashDirEnv+"="+dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			urls := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if u, ok := strings.CutPrefix(sc.Text(), "URL "); ok {
						urls <- u
					}
				}
			}()
			var first fakecloudtest.Env
			select {
			case first.URL = <-urls:
			case <-time.After(30 * time.Second):
				t.Fatal("the fakecloud to kill did not start")
			}
			first.Region = "us-east-1"
			c := first.EC2(t)
			ctx := context.Background()
			vol := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
			attached(t, c, vol, fakecloudtest.InstanceA, "/dev/xvdba")
			dev := hostDevice(t, dir, vol)
			const off = 64 << 20
			before := bytes.Repeat([]byte("before the request "), 4096)
			writeAt(t, dev, before, off)
			out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &vol})
			if err != nil {
				t.Fatal(err)
			}
			snap := aws.ToString(out.SnapshotId)
			// 256 MiB after the reply, over the bytes of the request too.
			later := bytes.Repeat([]byte("after the reply -- "), (256<<20)/19+1)[:256<<20]
			writeAt(t, dev, later, 0)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			env := startLoopCloud(t, fakecloud.BackendFuse, func(o *fakecloudtest.Options) { o.DataDir = dir })
			c = env.EC2(t)
			snaps, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{Filters: []types.Filter{
				{Name: aws.String("volume-id"), Values: []string{vol}}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps.Snapshots) != 1 || aws.ToString(snaps.Snapshots[0].SnapshotId) != snap {
				t.Fatalf("snapshots of the volume after the restart: %+v; want %s alone", snaps.Snapshots, snap)
			}
			snapFile := filepath.Join(dir, "snapshots", snap+".img")
			if tc.reflink {
				waitSnapshot(t, c, snap, types.SnapshotStateCompleted)
				if got := readAt(t, snapFile, len(before), off); !bytes.Equal(got, before) {
					t.Errorf("the completed snapshot does not hold the volume's bytes at its request")
				}
			} else {
				got := waitSnapshotSettled(t, c, snap)
				if got.State != types.SnapshotStateError || aws.ToString(got.StateMessage) == "" {
					holds := "?"
					if b, err := os.ReadFile(snapFile); err == nil && len(b) > off+len(before) {
						holds = fmt.Sprintf("the request's bytes: %v, later ones: %v", bytes.Equal(b[off:off+len(before)], before),
							bytes.Equal(b[off:off+len(before)], later[off:off+len(before)]))
					}
					t.Errorf("after the restart the snapshot is %s (%q); want error with a statusMessage. Its file holds %s",
						got.State, aws.ToString(got.StateMessage), holds)
				}
				if _, err := os.Stat(snapFile); err == nil {
					t.Errorf("a failed snapshot left its file %s", snapFile)
				}
			}
			// The volume keeps its data and a working device.
			if got := readAt(t, env.Server.Backend.DevicePath(vol), len(before), off); !bytes.Equal(got, later[off:off+len(before)]) {
				t.Error("the volume lost its writes across the kill")
			}
			// Nothing leaked or duplicated.
			if mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Join(dir, "fuse"))); err != nil || len(mounts) != 1 {
				t.Errorf("mounts on the FUSE mount point after the restart: %d (%v); want the live one alone", len(mounts), err)
			}
			devs, err := loopdev.Sysfs{}.BackedUnder(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(devs) != 1 || !devs[0].Live() || devs[0].Backing != env.Server.Backend.(deviceFiler).DeviceFile(vol) {
				t.Errorf("loop devices under the data directory after the restart: %+v; want the volume's alone", devs)
			}
			if left := temporaryFiles(t, dir); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
			entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Name() != snap+".img" || !tc.reflink {
					t.Errorf("file %s in the snapshots directory", e.Name())
				}
			}
		})
	}
}

// waitSnapshotSettled waits until the snapshot is no longer pending.
func waitSnapshotSettled(t *testing.T, c *ec2.Client, id string) types.Snapshot {
	t.Helper()
	var sn types.Snapshot
	fakecloudtest.WaitFor(t, 30*time.Second, "snapshot "+id+" settled", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{id}})
		if err != nil {
			return false, err
		}
		sn = out.Snapshots[0]
		return sn.State != types.SnapshotStatePending, nil
	})
	return sn
}
