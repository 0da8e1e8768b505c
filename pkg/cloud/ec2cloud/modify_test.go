package ec2cloud

import (
	"strings"
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
