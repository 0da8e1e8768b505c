package fakecloud_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// TestRestoreHydration: on the fuse backend, through the real SDK and a real loop device, the first read of a
// block of a restored volume beyond the background initialization waits for its fetch and returns the
// snapshot's bytes, the second read of it does not wait, and a restore in a zone with fast snapshot restore
// enabled never waits. The latency is large (1 s) so that the reads that must not wait are far below it.
func TestRestoreHydration(t *testing.T) {
	const latency = time.Second
	cloud := fakecloud.DefaultCloud()
	cloud.RestoreInitRate = 1 // MiB/s: the sweep stays far from the block read
	cloud.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: zoneA}, {ID: fakecloudtest.InstanceB, Zone: zoneB}}
	env := startLoopCloud(t, fakecloud.BackendFuse, func(o *fakecloudtest.Options) {
		o.Cloud, o.RestoreReadLatency = &cloud, latency
	})
	c := env.EC2(t)
	ctx := context.Background()

	src := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA), VolumeType: types.VolumeTypeGp3})
	const off = 512 << 20
	data := bytes.Repeat([]byte("hydrate!"), 512) // 4 KiB
	f, err := os.OpenFile(env.Server.Backend.VolumeFile(src), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	snapOut, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: &src})
	if err != nil {
		t.Fatal(err)
	}
	snap := aws.ToString(snapOut.SnapshotId)
	waitSnapshot(t, c, snap, types.SnapshotStateCompleted)

	cold := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap, AvailabilityZone: aws.String(zoneA)})
	if st := initState(volumeStatus(t, c, cold)); st != state.InitStateInitializing {
		t.Fatalf("restored volume's initialization-state %q, want %q", st, state.InitStateInitializing)
	}
	if _, err := c.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{
		AvailabilityZones: []string{zoneB}, SourceSnapshotIds: []string{snap}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); fastRestoreStates(t, c)[snap+"/"+zoneB].State != types.FastSnapshotRestoreStateCodeEnabled; {
		if time.Now().After(deadline) {
			t.Fatal("fast snapshot restore not enabled after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fast := availableVolume(t, c, &ec2.CreateVolumeInput{SnapshotId: &snap, AvailabilityZone: aws.String(zoneB)})

	attached(t, c, cold, fakecloudtest.InstanceA, "/dev/xvdba")
	attached(t, c, fast, fakecloudtest.InstanceB, "/dev/xvdba")
	read := func(volumeID string) time.Duration {
		t.Helper()
		dev := env.Server.Backend.DevicePath(volumeID)
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open %s: %v", dev, err)
		}
		defer unix.Close(fd)
		// Anonymous mappings are page-aligned, as O_DIRECT wants.
		buf, err := unix.Mmap(-1, 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(buf)
		start := time.Now()
		if _, err := unix.Pread(fd, buf, off); err != nil {
			t.Fatalf("read %s: %v", dev, err)
		}
		took := time.Since(start)
		if !bytes.Equal(buf, data) {
			t.Fatalf("%s read %q…, want the snapshot's bytes", volumeID, buf[:16])
		}
		return took
	}
	first, second, fastRead := read(cold), read(cold), read(fast)
	t.Logf("first read of a cold block %v, second %v, fast snapshot restore %v", first, second, fastRead)
	if first < latency {
		t.Errorf("first read of a cold block took %v, want at least the fetch latency %v", first, latency)
	}
	if second >= latency || fastRead >= latency {
		t.Errorf("second read %v, fast-restored read %v: want both without the fetch latency %v", second, fastRead, latency)
	}
}
