package ec2cloud

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func TestResizeDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{Modifying: 20 * time.Millisecond, Optimizing: time.Minute}})
	d := e.mustCreate(t, "pvc-grow", cloud.DiskOptions{SizeGiB: 1})
	size, err := e.ResizeDisk(testCtx(t), d.ID, 5)
	if err != nil || size != 5 {
		t.Fatalf("ResizeDisk = %d, %v; want 5", size, err)
	}
	// Usable at optimizing: the resize returned although the modification completes only in a minute.
	if v := e.rawVolume(t, d.ID); aws.ToInt32(v.Size) != 5 {
		t.Errorf("fakecloud size %d", aws.ToInt32(v.Size))
	}
	before := e.calls(t)["ModifyVolume"]
	if size, err := e.ResizeDisk(testCtx(t), d.ID, 3); err != nil || size != 5 {
		t.Errorf("resize to less = %d, %v; want the current 5", size, err)
	}
	if got := e.calls(t)["ModifyVolume"]; got != before {
		t.Errorf("a resize to less called ModifyVolume")
	}
	_, err = e.ResizeDisk(testCtx(t), "vol-0123456789abcdef0", 5)
	wantKinds(t, err, cloud.ErrNotFound)
	_, err = e.ResizeDisk(testCtx(t), d.ID, 0)
	wantKinds(t, err, cloud.ErrInvalidArgument)
}

func TestModifyDisk(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-mod", cloud.DiskOptions{SizeGiB: 10, VolumeType: "gp2"})
	m, err := e.ModifyDisk(testCtx(t), d.ID, cloud.ModifyOptions{VolumeType: "gp3", IOPS: 4000, Throughput: 250})
	if err != nil {
		t.Fatal(err)
	}
	if m.TargetVolumeType != "gp3" || m.TargetIOPS != 4000 || m.TargetThroughput != 250 || m.TargetSizeGiB != 10 {
		t.Errorf("modification = %+v", m)
	}
	got, err := e.GetDisk(testCtx(t), d.ID)
	if err != nil || got.VolumeType != "gp3" || got.IOPS != 4000 || got.Throughput != 250 {
		t.Fatalf("disk after modify = %+v, %v", got, err)
	}
	before := e.calls(t)["ModifyVolume"]
	if m, err := e.ModifyDisk(testCtx(t), d.ID, cloud.ModifyOptions{VolumeType: "gp3", IOPS: 4000}); err != nil || m.State != cloud.ModificationCompleted {
		t.Errorf("no-op modify = %+v, %v", m, err)
	}
	if e.calls(t)["ModifyVolume"] != before {
		t.Error("a no-op modify called ModifyVolume")
	}

	cases := []struct {
		name string
		opts cloud.ModifyOptions
		code string
	}{
		{"nothing", cloud.ModifyOptions{}, ""},
		{"shrink", cloud.ModifyOptions{SizeGiB: 5}, ""},
		{"IOPS too high", cloud.ModifyOptions{IOPS: 900000}, "InvalidParameterValue"},
		{"unknown type", cloud.ModifyOptions{VolumeType: "gp9"}, "InvalidParameterValue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.ModifyDisk(testCtx(t), d.ID, tc.opts)
			wantKinds(t, err, cloud.ErrInvalidArgument)
			if cloud.Code(err) != tc.code {
				t.Errorf("code %q, want %q", cloud.Code(err), tc.code)
			}
		})
	}
}

// TestModifyWaitsForModificationInProgress: EC2 refuses a modification while another is in progress
// (IncorrectModificationState); ResizeDisk waits for that one, then makes its own.
func TestModifyWaitsForModificationInProgress(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{Modifying: 150 * time.Millisecond}})
	d := e.mustCreate(t, "pvc-busy", cloud.DiskOptions{SizeGiB: 1})
	if _, err := e.raw(t).ModifyVolume(testCtx(t), &ec2.ModifyVolumeInput{VolumeId: aws.String(d.ID), Size: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	size, err := e.ResizeDisk(testCtx(t), d.ID, 4)
	if err != nil || size != 4 {
		t.Fatalf("ResizeDisk = %d, %v; want 4", size, err)
	}
	if got := e.calls(t)["ModifyVolume/IncorrectModificationState"]; got != 1 {
		t.Errorf("ModifyVolume refused %v times, want 1", got)
	}
}

// TestModifyRateLimit: EC2's cap on modifications per volume is a limit.
func TestModifyRateLimit(t *testing.T) {
	cfg := fakecloud.DefaultCloud()
	cfg.ModificationLimit, cfg.ModificationWindow = 1, time.Hour
	e := newTestEnv(t, fakecloudtest.Options{Cloud: &cfg})
	d := e.mustCreate(t, "pvc-rate", cloud.DiskOptions{SizeGiB: 1})
	if _, err := e.ResizeDisk(testCtx(t), d.ID, 2); err != nil {
		t.Fatal(err)
	}
	_, err := e.ResizeDisk(testCtx(t), d.ID, 3)
	wantKinds(t, err, cloud.ErrLimitExceeded)
}

func TestModifyWaitTimesOut(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Stuck: []string{faults.TransitionModify}}})
	d := e.mustCreate(t, "pvc-mod-stuck", cloud.DiskOptions{SizeGiB: 1})
	_, err := e.ResizeDisk(ctxTimeout(t, 300*time.Millisecond), d.ID, 2)
	if !isDeadline(err) || !strings.Contains(err.Error(), "modifying") {
		t.Fatalf("ResizeDisk = %v, want a deadline error naming the state", err)
	}
}

func TestMergeModifications(t *testing.T) {
	d := &cloud.Disk{ID: "vol-1", SizeGiB: 10, VolumeType: "gp3", IOPS: 3000, Throughput: 125}
	grow := func(size int32) *modifyRequest {
		return &modifyRequest{opts: cloud.ModifyOptions{SizeGiB: size}, grow: true}
	}
	modify := func(o cloud.ModifyOptions) *modifyRequest { return &modifyRequest{opts: o} }
	cases := []struct {
		name                string
		reqs                []*modifyRequest
		want                cloud.ModifyOptions
		now, later, refused int
	}{
		{"expand and modify fold into one", []*modifyRequest{grow(20), modify(cloud.ModifyOptions{IOPS: 4000})},
			cloud.ModifyOptions{SizeGiB: 20, IOPS: 4000}, 2, 0, 0},
		{"the largest size wins", []*modifyRequest{grow(20), grow(30), grow(15)}, cloud.ModifyOptions{SizeGiB: 30}, 3, 0, 0},
		{"an expansion to less asks nothing", []*modifyRequest{grow(5)}, cloud.ModifyOptions{}, 1, 0, 0},
		{"a modification to less is refused", []*modifyRequest{modify(cloud.ModifyOptions{SizeGiB: 5}), grow(12)},
			cloud.ModifyOptions{SizeGiB: 12}, 1, 0, 1},
		{"conflicting values go to the next round",
			[]*modifyRequest{modify(cloud.ModifyOptions{IOPS: 4000}), modify(cloud.ModifyOptions{IOPS: 5000, Throughput: 250}), modify(cloud.ModifyOptions{VolumeType: "io2"})},
			cloud.ModifyOptions{IOPS: 4000, VolumeType: "io2"}, 2, 1, 0},
		{"the same value twice is no conflict", []*modifyRequest{modify(cloud.ModifyOptions{Throughput: 250}), modify(cloud.ModifyOptions{Throughput: 250})},
			cloud.ModifyOptions{Throughput: 250}, 2, 0, 0},
		{"a size beyond the type's maximum is refused", []*modifyRequest{grow(70000), modify(cloud.ModifyOptions{IOPS: 4000})},
			cloud.ModifyOptions{IOPS: 4000}, 1, 0, 1},
		{"the size is checked against the type asked for", []*modifyRequest{modify(cloud.ModifyOptions{SizeGiB: 2000, VolumeType: "standard"})},
			cloud.ModifyOptions{}, 0, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, now, later, refused := merge(d, tc.reqs)
			if got != tc.want || len(now) != tc.now || len(later) != tc.later || len(refused) != tc.refused {
				t.Errorf("merge = %+v, %d now, %d later, %d refused; want %+v, %d, %d, %d",
					got, len(now), len(later), len(refused), tc.want, tc.now, tc.later, tc.refused)
			}
		})
	}
}

// TestModificationsCoalesce: a ResizeDisk and a ModifyDisk that meet become one ModifyVolume, and a third
// that arrives while that one is optimizing waits for it to complete instead of being refused.
func TestModificationsCoalesce(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{Modifying: 50 * time.Millisecond, Optimizing: 200 * time.Millisecond},
		// A slow DescribeVolumes keeps the first request's round open while the second arrives.
		Faults: faults.Config{Latency: map[string]faults.Duration{"DescribeVolumes": faults.Duration(50 * time.Millisecond)}}})
	d := e.mustCreate(t, "pvc-coalesce", cloud.DiskOptions{SizeGiB: 10, VolumeType: "gp3"})
	var wg sync.WaitGroup
	var size int32
	var resizeErr, modifyErr error
	wg.Go(func() { size, resizeErr = e.ResizeDisk(testCtx(t), d.ID, 20) })
	wg.Go(func() { _, modifyErr = e.ModifyDisk(testCtx(t), d.ID, cloud.ModifyOptions{IOPS: 5000}) })
	wg.Wait()
	if resizeErr != nil || modifyErr != nil || size != 20 {
		t.Fatalf("resize = %d, %v; modify: %v", size, resizeErr, modifyErr)
	}
	if got := e.calls(t)["ModifyVolume"]; got != 1 {
		t.Errorf("ModifyVolume calls = %v, want 1", got)
	}
	m, err := e.ModifyDisk(testCtx(t), d.ID, cloud.ModifyOptions{Throughput: 300})
	if err != nil || m.TargetThroughput != 300 {
		t.Fatalf("modify while optimizing = %+v, %v; want it to wait and succeed", m, err)
	}
	calls := e.calls(t)
	if calls["ModifyVolume"] != 2 || calls["ModifyVolume/IncorrectModificationState"] != 0 {
		t.Errorf("ModifyVolume calls = %v (%v refused), want 2 and none refused", calls["ModifyVolume"], calls["ModifyVolume/IncorrectModificationState"])
	}
	// A caller that gives up is told how far the modification got.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.ResizeDisk(ctx, d.ID, 30); !isDeadline(err) {
		t.Errorf("resize with a short deadline = %v, want a deadline error", err)
	}
}
