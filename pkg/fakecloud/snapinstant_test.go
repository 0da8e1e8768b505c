package fakecloud_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
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
