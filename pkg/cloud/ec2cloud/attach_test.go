package ec2cloud

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

const (
	inst1 = "i-0a000000000000001"
	inst2 = "i-0a000000000000002"
	instB = "i-0b000000000000002"
)

// heldDevice reports the device name the allocator holds for a volume on an instance ("" if none).
func (e *testEnv) heldDevice(instanceID, volumeID string) string {
	a := e.devices
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.instances[instanceID]; ok {
		for dev, use := range st.inUse {
			if use.volumeID == volumeID {
				return dev
			}
		}
	}
	return ""
}

func TestAttachDetach(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	d := e.mustCreate(t, "pvc-att", cloud.DiskOptions{})
	a, err := e.AttachDisk(testCtx(t), d.ID, inst1)
	if err != nil {
		t.Fatal(err)
	}
	if a.VolumeID != d.ID || a.InstanceID != inst1 || a.State != cloud.AttachmentAttached || !slices.Contains(deviceNames, a.Device) {
		t.Fatalf("attachment = %+v", a)
	}
	v := e.rawVolume(t, d.ID)
	if len(v.Attachments) != 1 || aws.ToString(v.Attachments[0].Device) != a.Device || v.Attachments[0].State != ec2types.VolumeAttachmentStateAttached {
		t.Fatalf("fakecloud attachment = %+v", v.Attachments)
	}

	// Attaching again is idempotent: same device, no second attachment.
	again, err := e.AttachDisk(testCtx(t), d.ID, inst1)
	if err != nil || again.Device != a.Device {
		t.Fatalf("second attach = %+v, %v; want device %s", again, err, a.Device)
	}
	if got, err := e.GetDisk(testCtx(t), d.ID); err != nil || len(got.Attachments) != 1 || got.State != cloud.DiskInUse {
		t.Fatalf("GetDisk after attach = %+v, %v", got, err)
	}

	if err := e.DetachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatal(err)
	}
	if v := e.rawVolume(t, d.ID); len(v.Attachments) != 0 || v.State != ec2types.VolumeStateAvailable {
		t.Fatalf("after detach fakecloud has %s with %+v", v.State, v.Attachments)
	}
	if dev := e.heldDevice(inst1, d.ID); dev != "" {
		t.Errorf("device %s still held after detach", dev)
	}
	// Detaching what is not attached is a success.
	if err := e.DetachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Errorf("second detach: %v", err)
	}
}

// TestAttachManyToOneInstance: concurrent attaches get distinct names from one DescribeInstances.
func TestAttachManyToOneInstance(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(40)})
	const n = 12
	disks := make([]*cloud.Disk, n)
	for i, name := range names("pvc-many", n) {
		disks[i] = e.mustCreate(t, name, cloud.DiskOptions{})
	}
	devs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := e.AttachDisk(testCtx(t), disks[i].ID, inst1)
			if err != nil {
				t.Error(err)
				return
			}
			devs[i] = a.Device
		})
	}
	wg.Wait()
	slices.Sort(devs)
	if len(slices.Compact(slices.Clone(devs))) != n {
		t.Errorf("devices not distinct: %v", devs)
	}
	if calls := e.calls(t); calls["DescribeInstances"] != 1 || calls["AttachVolume"] != n {
		t.Errorf("calls: DescribeInstances %v, AttachVolume %v; want 1 and %d", calls["DescribeInstances"], calls["AttachVolume"], n)
	}
}

// TestAttachMovesOnFromDeviceInUse: a name taken behind the allocator's back is refused by EC2 ("already in
// use"); the attach moves to the next name.
func TestAttachMovesOnFromDeviceInUse(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	first := e.mustCreate(t, "pvc-first", cloud.DiskOptions{})
	a1, err := e.AttachDisk(testCtx(t), first.ID, inst1)
	if err != nil {
		t.Fatal(err)
	}
	// The allocator would hand out the name after a1's next; take it with a raw call.
	next := deviceNames[slices.Index(deviceNames, a1.Device)+1]
	sneaky := e.mustCreate(t, "pvc-sneaky", cloud.DiskOptions{})
	if _, err := e.raw(t).AttachVolume(testCtx(t), &ec2.AttachVolumeInput{VolumeId: aws.String(sneaky.ID),
		InstanceId: aws.String(inst1), Device: aws.String(next)}); err != nil {
		t.Fatal(err)
	}
	third := e.mustCreate(t, "pvc-third", cloud.DiskOptions{})
	a3, err := e.AttachDisk(testCtx(t), third.ID, inst1)
	if err != nil {
		t.Fatal(err)
	}
	if a3.Device == next || a3.Device == a1.Device {
		t.Errorf("third attach got %s; %s and %s are taken", a3.Device, a1.Device, next)
	}
	if got := e.calls(t)["AttachVolume/InvalidParameterValue"]; got != 1 {
		t.Errorf("AttachVolume refused %v times, want 1", got)
	}
}

func TestAttachErrors(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(2)})
	d := e.mustCreate(t, "pvc-err", cloud.DiskOptions{})
	cases := []struct {
		name     string
		volume   string
		instance string
		want     []error
		code     string
	}{
		{"zone mismatch", d.ID, instB, []error{cloud.ErrZoneMismatch}, "InvalidVolume.ZoneMismatch"},
		{"unknown volume", "vol-0123456789abcdef0", inst1, []error{cloud.ErrNotFound}, "InvalidVolume.NotFound"},
		{"unknown instance", d.ID, "i-0123456789abcdef0", []error{cloud.ErrNotFound}, "InvalidInstanceID.NotFound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.AttachDisk(testCtx(t), tc.volume, tc.instance)
			wantKinds(t, err, tc.want...)
			if cloud.Code(err) != tc.code {
				t.Errorf("code %q, want %q", cloud.Code(err), tc.code)
			}
			if dev := e.heldDevice(tc.instance, tc.volume); dev != "" {
				t.Errorf("failed attach still holds %s", dev)
			}
		})
	}
	t.Run("in use elsewhere", func(t *testing.T) {
		if _, err := e.AttachDisk(testCtx(t), d.ID, inst1); err != nil {
			t.Fatal(err)
		}
		_, err := e.AttachDisk(testCtx(t), d.ID, inst2)
		wantKinds(t, err, cloud.ErrInUse)
	})
	t.Run("attachment limit", func(t *testing.T) {
		// inst1 takes 2; d holds one.
		d2 := e.mustCreate(t, "pvc-err-2", cloud.DiskOptions{})
		if _, err := e.AttachDisk(testCtx(t), d2.ID, inst1); err != nil {
			t.Fatal(err)
		}
		d3 := e.mustCreate(t, "pvc-err-3", cloud.DiskOptions{})
		_, err := e.AttachDisk(testCtx(t), d3.ID, inst1)
		wantKinds(t, err, cloud.ErrLimitExceeded)
		if cloud.Code(err) != "AttachmentLimitExceeded" {
			t.Errorf("code %q", cloud.Code(err))
		}
	})
	t.Run("volume creating", func(t *testing.T) {
		if err := e.fc.Server.Faults.SetConfig(faults.Config{Stuck: []string{faults.TransitionVolumeCreate}}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = e.fc.Server.Faults.SetConfig(faults.Config{}) }()
		out, err := e.raw(t).CreateVolume(testCtx(t), &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(1)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.AttachDisk(testCtx(t), aws.ToString(out.VolumeId), inst2)
		wantKinds(t, err, cloud.ErrIncorrectState)
	})
}

// TestAttachAfterLostReply: fakecloud attaches and then answers InternalError; the SDK's retry meets
// VolumeInUse, and AttachDisk adopts the attachment it made.
func TestAttachAfterLostReply(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	d := e.mustCreate(t, "pvc-att-lost", cloud.DiskOptions{})
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"AttachVolume": {Rate: 1, Code: "InternalError", Count: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	a, err := e.AttachDisk(testCtx(t), d.ID, inst1)
	if err != nil {
		t.Fatal(err)
	}
	v := e.rawVolume(t, d.ID)
	if len(v.Attachments) != 1 || aws.ToString(v.Attachments[0].Device) != a.Device {
		t.Fatalf("fakecloud attachments %+v, returned %+v", v.Attachments, a)
	}
	if calls := e.calls(t); calls["AttachVolume/InternalError"] != 1 || calls["AttachVolume/VolumeInUse"] != 1 {
		t.Errorf("AttachVolume calls: %v", calls)
	}
}

// TestAttachAndDetachWaitsTimeOut: stuck transitions hold the waits until their contexts end; once the
// cloud recovers, calling again finishes the job.
func TestAttachAndDetachWaitsTimeOut(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	d := e.mustCreate(t, "pvc-slow", cloud.DiskOptions{})
	setStuck := func(s ...string) {
		t.Helper()
		if err := e.fc.Server.Faults.SetConfig(faults.Config{Stuck: s}); err != nil {
			t.Fatal(err)
		}
	}

	setStuck(faults.TransitionAttach)
	_, err := e.AttachDisk(ctxTimeout(t, 300*time.Millisecond), d.ID, inst1)
	if !isDeadline(err) || !strings.Contains(err.Error(), "attaching") {
		t.Fatalf("AttachDisk = %v, want a deadline error naming the state", err)
	}
	held := e.heldDevice(inst1, d.ID)
	setStuck()
	a, err := e.AttachDisk(testCtx(t), d.ID, inst1)
	if err != nil || a.Device != held {
		t.Fatalf("attach after recovery = %+v, %v; want the device %s of the first try", a, err, held)
	}

	setStuck(faults.TransitionDetach)
	err = e.DetachDisk(ctxTimeout(t, 300*time.Millisecond), d.ID, inst1)
	if !isDeadline(err) || !strings.Contains(err.Error(), "detaching") {
		t.Fatalf("DetachDisk = %v, want a deadline error naming the state", err)
	}
	setStuck()
	if err := e.DetachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatal(err)
	}
	if v := e.rawVolume(t, d.ID); hasAttachment(v, inst1) {
		t.Errorf("still attached: %+v", v.Attachments)
	}
}

func TestDetachErrors(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	err := e.DetachDisk(testCtx(t), "vol-0123456789abcdef0", inst1)
	wantKinds(t, err, cloud.ErrNotFound)

	// Detaching from an instance the disk is not attached to succeeds and leaves the real attachment alone.
	d := e.mustCreate(t, "pvc-det", cloud.DiskOptions{})
	if _, err := e.AttachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatal(err)
	}
	if err := e.DetachDisk(testCtx(t), d.ID, inst2); err != nil {
		t.Errorf("detach from the other instance: %v", err)
	}
	if v := e.rawVolume(t, d.ID); !hasAttachment(v, inst1) {
		t.Errorf("attachment to %s lost", inst1)
	}
}

// TestAttachMultiAttach: an io2 disk attaches to two instances of its zone under their own names.
func TestAttachMultiAttach(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0), Durations: state.Durations{Attach: 20 * time.Millisecond}})
	d := e.mustCreate(t, "pvc-multi", cloud.DiskOptions{SizeGiB: 4, VolumeType: "io2", IOPS: 100, MultiAttach: true})
	for _, inst := range []string{inst1, inst2} {
		if _, err := e.AttachDisk(testCtx(t), d.ID, inst); err != nil {
			t.Fatalf("attach to %s: %v", inst, err)
		}
	}
	if err := e.DetachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatal(err)
	}
	if v := e.rawVolume(t, d.ID); hasAttachment(v, inst1) || !hasAttachment(v, inst2) {
		t.Errorf("attachments after detaching from %s: %+v", inst1, v.Attachments)
	}
}

// TestAttachWhileDetaching: a disk still detaching from the instance is not ready, rather than in use.
func TestAttachWhileDetaching(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)})
	d := e.mustCreate(t, "pvc-redo", cloud.DiskOptions{})
	if _, err := e.AttachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatal(err)
	}
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Stuck: []string{faults.TransitionDetach}}); err != nil {
		t.Fatal(err)
	}
	if err := e.DetachDisk(ctxTimeout(t, 100*time.Millisecond), d.ID, inst1); !isDeadline(err) {
		t.Fatalf("DetachDisk = %v, want a deadline error", err)
	}
	_, err := e.AttachDisk(testCtx(t), d.ID, inst1)
	wantKinds(t, err, cloud.ErrIncorrectState)
}

// TestAttachToVanishingInstance: parallel attaches to an instance that disappears while they run all answer
// NotFound (or succeed, when they beat its removal), and none panics.
func TestAttachToVanishingInstance(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(40)})
	const n = 16
	disks := make([]*cloud.Disk, n)
	for i := range disks {
		disks[i] = e.mustCreate(t, fmt.Sprintf("pvc-vanish-%d", i), cloud.DiskOptions{})
	}
	// Learn the instance's devices first, so that the attaches below pick from a learned instance.
	if _, err := e.AttachDisk(testCtx(t), disks[0].ID, inst1); err != nil {
		t.Fatal(err)
	}
	if err := e.fc.Server.State.RemoveInstance(inst1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i < n; i++ {
		wg.Go(func() { _, errs[i] = e.AttachDisk(testCtx(t), disks[i].ID, inst1) })
	}
	wg.Wait()
	for i, err := range errs[1:] {
		if !errors.Is(err, cloud.ErrNotFound) {
			t.Errorf("attach %d to a removed instance: %v, want ErrNotFound", i+1, err)
		}
	}
}
