package fakecloud_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// pairWriter writes a counter to two devices in turn without pause, with O_DIRECT so each write has reached
// fakecloud when it returns: n to the first, then n to the second, then n+1 to the first… At any instant the
// first holds n and the second n or n-1.
type pairWriter struct {
	written atomic.Int64
	stop    chan struct{}
	done    chan error
	once    sync.Once
	err     error
}

// finish stops the writer and returns its error.
func (w *pairWriter) finish() error {
	w.once.Do(func() {
		close(w.stop)
		w.err = <-w.done
	})
	return w.err
}

func startPairWriter(t *testing.T, devA, devB string) *pairWriter {
	t.Helper()
	var files []*os.File
	for _, dev := range []string{devA, devB} {
		f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// O_DIRECT needs an aligned buffer: an anonymous mapping is page-aligned.
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	w := &pairWriter{stop: make(chan struct{}), done: make(chan error, 1)}
	t.Cleanup(func() { _ = w.finish(); _ = unix.Munmap(buf) })
	go func() {
		defer func() {
			for _, f := range files {
				_ = f.Close()
			}
		}()
		for n := int64(1); ; n++ {
			select {
			case <-w.stop:
				w.done <- nil
				return
			default:
			}
			binary.LittleEndian.PutUint64(buf, uint64(n))
			for _, f := range files {
				if _, err := f.WriteAt(buf, 0); err != nil {
					w.done <- err
					return
				}
			}
			w.written.Store(n)
		}
	}()
	return w
}

func counterIn(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 8)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// TestFuseCreateSnapshotsOneInstant: CreateSnapshots of an instance's two volumes, while a writer writes a
// counter to both in turn, gives snapshots of one instant: the first volume's snapshot holds n, the second's n
// or n-1, every time. Two CreateSnapshot calls, one per volume, are logged for comparison: the second
// snapshot is later, and holds a larger counter.
func TestFuseCreateSnapshotsOneInstant(t *testing.T) {
	env := startLoopCloud(t, fakecloud.BackendFuse)
	c := env.EC2(t)
	ctx := context.Background()
	a := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
	b := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
	attached(t, c, a, fakecloudtest.InstanceA, "/dev/xvdba")
	attached(t, c, b, fakecloudtest.InstanceA, "/dev/xvdbb")
	w := startPairWriter(t, env.Server.Backend.DevicePath(a), env.Server.Backend.DevicePath(b))
	fakecloudtest.WaitFor(t, 10e9, "the writer's first writes", func(context.Context) (bool, error) { return w.written.Load() > 100, nil })
	snapFile := func(id string) string { return filepath.Join(env.DataDir, "snapshots", id+".img") }

	for round := range 5 {
		before := w.written.Load()
		out, err := c.CreateSnapshots(ctx, &ec2.CreateSnapshotsInput{InstanceSpecification: &types.InstanceSpecification{InstanceId: aws.String(fakecloudtest.InstanceA)}})
		if err != nil {
			t.Fatal(err)
		}
		after := w.written.Load()
		got := map[string]int64{}
		for _, sn := range out.Snapshots {
			id := aws.ToString(sn.SnapshotId)
			waitSnapshot(t, c, id, types.SnapshotStateCompleted)
			got[aws.ToString(sn.VolumeId)] = counterIn(t, snapFile(id))
		}
		if len(got) != 2 {
			t.Fatalf("round %d: snapshots of %v", round, got)
		}
		if ga, gb := got[a], got[b]; ga != gb && ga != gb+1 || ga < before || ga > after+1 {
			t.Fatalf("round %d: the snapshots are not of one instant: first volume %d, second %d (writes %d..%d during the call)", round, ga, gb, before, after)
		}
		t.Logf("round %d: one instant, counters %d and %d; %d writes during the call", round, got[a], got[b], after-before)
	}

	// For comparison: one CreateSnapshot per volume.
	var ids []string
	for _, vol := range []string{a, b} {
		out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: aws.String(vol)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.SnapshotId))
	}
	for _, id := range ids {
		waitSnapshot(t, c, id, types.SnapshotStateCompleted)
	}
	t.Logf("two CreateSnapshot calls hold counters %d and %d", counterIn(t, snapFile(ids[0])), counterIn(t, snapFile(ids[1])))

	if err := w.finish(); err != nil {
		t.Fatalf("the writer failed: %v", err)
	}
}
