package ec2cloud

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// stuckEnv is a cloud with a short stuck bound whose requests are recorded; stuck holds the next attachments.
func stuckEnv(t *testing.T, bound time.Duration, stuck ...string) (*testEnv, *fakecloudtest.RequestLog) {
	t.Helper()
	var rec *fakecloudtest.RequestLog
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0), Faults: faults.Config{Stuck: stuck}}, func(o *Options) {
		o.AttachStuckTimeout = bound
		rec, o.Endpoint = fakecloudtest.RecordingProxy(t, o.Endpoint)
	})
	return e, rec
}

// testBound is the stuck bound of these tests: long enough that an attachment that is not held is attached
// well within it on a loaded machine, short enough to keep the tests quick.
const testBound = time.Second

// TestAttachStuck: an attachment held attaching is detached by force and made again, once; a second stuck one
// is ErrAttachmentStuck, and the next call (AttachDisk or WaitForAttachment on what it reads) unsticks it and
// attaches. With the bound off nothing is detached.
func TestAttachStuck(t *testing.T) {
	cases := []struct {
		name  string
		bound time.Duration
		stuck string
		// firstErr is the first AttachDisk's error kind (nil: it succeeds; context.DeadlineExceeded: it times out).
		firstErr error
		// then is how the next call is made, after a failed first one.
		then string
		// attaches and forced are the AttachVolume and forced DetachVolume requests in all.
		attaches, forced int
	}{
		{name: "stuck once", bound: testBound, stuck: "attach:1", attaches: 2, forced: 1},
		{name: "stuck twice, then AttachDisk", bound: testBound, stuck: "attach:2", firstErr: cloud.ErrAttachmentStuck, then: "attach",
			attaches: 4, forced: 2}, // the retry's AttachVolume is refused as VolumeInUse, and adopts the stuck one
		{name: "stuck twice, then WaitForAttachment", bound: testBound, stuck: "attach:2", firstErr: cloud.ErrAttachmentStuck, then: "wait",
			attaches: 3, forced: 2},
		{name: "bound off", bound: 0, stuck: "attach:1", firstErr: context.DeadlineExceeded, attaches: 1, forced: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, rec := stuckEnv(t, tc.bound, tc.stuck)
			d := e.mustCreate(t, "pvc-stuck", cloud.DiskOptions{})
			ctx := testCtx(t)
			if tc.firstErr == context.DeadlineExceeded {
				ctx = ctxTimeout(t, 3*testBound)
			}
			a, err := e.AttachDisk(ctx, d.ID, inst1)
			switch {
			case tc.firstErr == context.DeadlineExceeded:
				if !isDeadline(err) {
					t.Fatalf("AttachDisk = %+v, %v; want a deadline error", a, err)
				}
			case tc.firstErr != nil:
				wantKinds(t, err, tc.firstErr)
				if v := e.rawVolume(t, d.ID); len(v.Attachments) != 1 || v.Attachments[0].State != ec2types.VolumeAttachmentStateAttaching {
					t.Fatalf("after a second stuck attachment fakecloud has %+v, want it left attaching", v.Attachments)
				}
				if tc.then == "attach" {
					a, err = e.AttachDisk(testCtx(t), d.ID, inst1)
				} else {
					disk, gerr := e.GetDisk(testCtx(t), d.ID)
					if gerr != nil || len(disk.Attachments) != 1 || disk.Attachments[0].AttachTime.IsZero() {
						t.Fatalf("GetDisk = %+v, %v; want the attachment with its attach time", disk, gerr)
					}
					a, err = e.WaitForAttachment(testCtx(t), disk.Attachments[0])
				}
			}
			if tc.firstErr == nil || tc.then != "" {
				if err != nil || a.State != cloud.AttachmentAttached {
					t.Fatalf("attach = %+v, %v; want attached", a, err)
				}
				v := e.rawVolume(t, d.ID)
				if len(v.Attachments) != 1 || aws.ToString(v.Attachments[0].Device) != a.Device ||
					v.Attachments[0].State != ec2types.VolumeAttachmentStateAttached {
					t.Errorf("fakecloud has %+v, want attached as %s", v.Attachments, a.Device)
				}
			}
			attaches := rec.Requests("AttachVolume")
			if len(attaches) != tc.attaches || rec.Count("DetachVolume", "Force=true") != tc.forced || len(rec.Requests("DetachVolume")) != tc.forced {
				t.Errorf("AttachVolume %d, DetachVolume %d (forced %d); want %d, %d forced", len(attaches),
					len(rec.Requests("DetachVolume")), rec.Count("DetachVolume", "Force=true"), tc.attaches, tc.forced)
			}
			if tc.attaches >= 2 && attaches[0].Get("Device") == attaches[1].Get("Device") {
				t.Errorf("the attach after a stuck one reused its device %s", attaches[0].Get("Device"))
			}
		})
	}
}

// TestAttachFoundStuck: an attachment another client started, stuck past the bound by its attach time, is
// unstuck by the first WaitForAttachment at once; a DetachDisk refused for such an attachment detaches it by
// force.
func TestAttachFoundStuck(t *testing.T) {
	cases := []struct {
		name string
		// run acts on the stuck attachment a.
		run func(t *testing.T, e *testEnv, a cloud.Attachment) error
		// attached: the volume ends attached (else detached).
		attached bool
	}{
		{name: "wait for it", attached: true, run: func(t *testing.T, e *testEnv, a cloud.Attachment) error {
			_, err := e.WaitForAttachment(testCtx(t), a)
			return err
		}},
		{name: "detach refused", run: func(t *testing.T, e *testEnv, a cloud.Attachment) error {
			// EC2 may refuse a plain detach of an attachment still attaching.
			if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
				"DetachVolume": {Rate: 1, Code: "IncorrectState", Count: 1, Before: true},
			}}); err != nil {
				t.Fatal(err)
			}
			return e.DetachDisk(testCtx(t), a.VolumeID, a.InstanceID)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, rec := stuckEnv(t, testBound, "attach:1")
			d := e.mustCreate(t, "pvc-found-stuck", cloud.DiskOptions{})
			if _, err := e.raw(t).AttachVolume(testCtx(t), &ec2.AttachVolumeInput{VolumeId: aws.String(d.ID),
				InstanceId: aws.String(inst1), Device: aws.String("/dev/xvdzz")}); err != nil {
				t.Fatal(err)
			}
			var found cloud.Attachment
			fakecloudtest.WaitFor(t, 10*testBound, "the attachment stuck past the bound", func(ctx context.Context) (bool, error) {
				disk, err := e.GetDisk(ctx, d.ID)
				if err != nil || len(disk.Attachments) != 1 {
					return false, err
				}
				found = disk.Attachments[0]
				return found.State == cloud.AttachmentAttaching && time.Since(found.AttachTime) > testBound, nil
			})
			if err := tc.run(t, e, found); err != nil {
				t.Fatal(err)
			}
			v := e.rawVolume(t, d.ID)
			if got := hasAttachment(v, inst1); got != tc.attached {
				t.Errorf("attached = %v (%+v), want %v", got, v.Attachments, tc.attached)
			}
			if rec.Count("DetachVolume", "Force=true") != 1 {
				t.Errorf("forced detaches %d, want 1", rec.Count("DetachVolume", "Force=true"))
			}
			// The one found stuck was detached at once: no wait through a bound of its own first.
			if n := len(rec.Requests("AttachVolume")); tc.attached && n != 1 {
				t.Errorf("AttachVolume %d, want 1 (the new attachment)", n)
			}
			if dev := e.heldDevice(inst1, d.ID); !tc.attached && dev != "" {
				t.Errorf("device %s still held after the detach", dev)
			}
		})
	}
}
