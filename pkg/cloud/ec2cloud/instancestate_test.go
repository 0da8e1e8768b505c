package ec2cloud

import (
	"context"
	"errors"
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

// instanceState is the instance's state as EC2 reports it, "" when EC2 no longer knows it.
func (e *testEnv) instanceState(t testing.TB, ctx context.Context, id string) (string, error) {
	t.Helper()
	out, err := e.raw(t).DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("instance-id", id)}})
	if err != nil {
		return "", err
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			return string(in.State.Name), nil
		}
	}
	return "", nil
}

// waitInstance waits until EC2 reports the instance in one of states ("" for gone).
func (e *testEnv) waitInstance(t testing.TB, id string, states ...string) {
	t.Helper()
	fakecloudtest.WaitFor(t, 10*time.Second, "instance "+id+" in "+states[0], func(ctx context.Context) (bool, error) {
		st, err := e.instanceState(t, ctx, id)
		for _, s := range states {
			if err == nil && st == s {
				return true, nil
			}
		}
		return false, err
	})
}

// instanceAction moves an instance through EC2's API, as a user (or a lost node) would.
type instanceAction func(t testing.TB, e *testEnv, id string)

func stopInstance(t testing.TB, e *testEnv, id string) {
	t.Helper()
	if _, err := e.raw(t).StopInstances(testCtx(t), &ec2.StopInstancesInput{InstanceIds: []string{id}, Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	e.waitInstance(t, id, cloud.InstanceStopped)
}

func terminateInstance(t testing.TB, e *testEnv, id string) {
	t.Helper()
	if _, err := e.raw(t).TerminateInstances(testCtx(t), &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
}

// shutDown terminates the instance and leaves it shutting down (the cloud's InstanceTerminate is long).
func shutDown(t testing.TB, e *testEnv, id string) {
	t.Helper()
	terminateInstance(t, e, id)
	e.waitInstance(t, id, cloud.InstanceShuttingDown)
}

// terminate terminates the instance and waits until EC2 reports it terminated.
func terminate(t testing.TB, e *testEnv, id string) {
	t.Helper()
	terminateInstance(t, e, id)
	e.waitInstance(t, id, cloud.InstanceTerminated)
}

// forget makes EC2 forget the instance altogether (a terminated instance past its retention).
func forget(t testing.TB, e *testEnv, id string) {
	t.Helper()
	if err := e.fc.Server.State.RemoveInstance(id); err != nil {
		t.Fatal(err)
	}
	e.waitInstance(t, id, "")
}

// lifecycleEnv is a cloud whose shutting-down instances stay so (InstanceTerminate is long) unless fast.
func lifecycleEnv(t *testing.T, fast bool) *testEnv {
	d := state.Durations{InstanceTerminate: time.Hour}
	if fast {
		d = state.Durations{}
	}
	return newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0), Durations: d})
}

// TestDetachFromInstanceThatStoppedOrEnded: unpublishing from a node that is stopped, ending, ended or
// unknown succeeds, and leaves the volume free to attach elsewhere.
func TestDetachFromInstanceThatStoppedOrEnded(t *testing.T) {
	cases := []struct {
		name string
		fast bool
		act  instanceAction
	}{
		{"stopped", true, stopInstance},
		{"shutting-down", false, shutDown},
		{"terminated", true, terminate},
		{"terminated and forgotten", true, func(t testing.TB, e *testEnv, id string) { terminate(t, e, id); forget(t, e, id) }},
		{"never existed", true, func(testing.TB, *testEnv, string) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := lifecycleEnv(t, tc.fast)
			d := e.mustCreate(t, "pvc-gone", cloud.DiskOptions{})
			target := inst2
			if tc.name == "never existed" {
				target = "i-0a0000000000000ff"
			} else if _, err := e.AttachDisk(testCtx(t), d.ID, inst2); err != nil {
				t.Fatal(err)
			}
			tc.act(t, e, inst2)
			for i := range 2 {
				if err := e.DetachDisk(testCtx(t), d.ID, target); err != nil {
					t.Fatalf("detach %d from a %s instance: %v", i+1, tc.name, err)
				}
			}
			if v := e.rawVolume(t, d.ID); hasAttachment(v, inst2) {
				t.Errorf("still attached to %s: %+v", inst2, v.Attachments)
			}
			if _, err := e.AttachDisk(testCtx(t), d.ID, inst1); err != nil {
				t.Errorf("attach elsewhere after the detach: %v", err)
			}
		})
	}
}

// TestAttachToInstanceStates: a stopped instance takes the attachment, as on EC2; one that is shutting down,
// terminated or unknown is not found (ErrInstanceGone where EC2 still knows it).
func TestAttachToInstanceStates(t *testing.T) {
	cases := []struct {
		name string
		fast bool
		act  instanceAction
		want []error
	}{
		{"running", true, func(testing.TB, *testEnv, string) {}, nil},
		{"stopped", true, stopInstance, nil},
		{"shutting-down", false, shutDown, []error{cloud.ErrInstanceGone, cloud.ErrNotFound}},
		{"terminated", true, terminate, []error{cloud.ErrInstanceGone, cloud.ErrNotFound}},
		{"forgotten", true, func(t testing.TB, e *testEnv, id string) { terminate(t, e, id); forget(t, e, id) }, []error{cloud.ErrNotFound}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := lifecycleEnv(t, tc.fast)
			d := e.mustCreate(t, "pvc-target", cloud.DiskOptions{})
			// The instance's devices are known before it changes, as on a busy node.
			warm := e.mustCreate(t, "pvc-warm", cloud.DiskOptions{})
			if _, err := e.AttachDisk(testCtx(t), warm.ID, inst2); err != nil {
				t.Fatal(err)
			}
			tc.act(t, e, inst2)
			a, err := e.AttachDisk(testCtx(t), d.ID, inst2)
			if tc.want == nil {
				if err != nil || a.State != cloud.AttachmentAttached {
					t.Fatalf("attach to a %s instance = %+v, %v", tc.name, a, err)
				}
				if v := e.rawVolume(t, d.ID); !hasAttachment(v, inst2) {
					t.Errorf("fakecloud shows no attachment: %+v", v.Attachments)
				}
				return
			}
			wantKinds(t, err, tc.want...)
			if dev := e.heldDevice(inst2, d.ID); dev != "" {
				t.Errorf("failed attach still holds %s", dev)
			}
		})
	}
}

// TestAttachInUseByStoppedOrEndingInstance: a volume still attached to another instance is in use, and the
// error names that instance and its state.
func TestAttachInUseByStoppedOrEndingInstance(t *testing.T) {
	cases := []struct {
		name            string
		fast            bool
		faults          faults.Config
		act             instanceAction
		instanceState   string
		attachmentState string
	}{
		{"running", true, faults.Config{}, func(testing.TB, *testEnv, string) {}, cloud.InstanceRunning, cloud.AttachmentAttached},
		{"stopped", true, faults.Config{}, stopInstance, cloud.InstanceStopped, cloud.AttachmentAttached},
		// The instance's end holds the detach still, so the attachment outlives it for a while, as on EC2.
		{"shutting-down", false, faults.Config{Stuck: []string{faults.TransitionDetach}}, shutDown, cloud.InstanceShuttingDown, cloud.AttachmentDetaching},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := lifecycleEnv(t, tc.fast)
			d := e.mustCreate(t, "pvc-elsewhere", cloud.DiskOptions{})
			if _, err := e.AttachDisk(testCtx(t), d.ID, inst2); err != nil {
				t.Fatal(err)
			}
			if err := e.fc.Server.Faults.SetConfig(tc.faults); err != nil {
				t.Fatal(err)
			}
			tc.act(t, e, inst2)
			_, err := e.AttachDisk(testCtx(t), d.ID, inst1)
			wantKinds(t, err, cloud.ErrInUse)
			var ae *cloud.AttachedElsewhereError
			if !errors.As(err, &ae) || ae.InstanceID != inst2 || ae.InstanceState != tc.instanceState || ae.AttachmentState != tc.attachmentState {
				t.Errorf("error %v (%#v), want instance %s %s, attachment %s", err, ae, inst2, tc.instanceState, tc.attachmentState)
			}
		})
	}
}

// TestAttachToInstanceTerminatedMidway: an attach in flight when its instance is terminated answers that the
// instance is gone (NotFound for the CO), as soon as the attachment vanishes, and not a failed attach once
// the eventual-consistency grace for a missing attachment has run out.
func TestAttachToInstanceTerminatedMidway(t *testing.T) {
	const grace = 10 * time.Second
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0), Durations: state.Durations{Attach: time.Hour}},
		func(o *Options) { o.Wait.ConsistencyGrace = grace })
	d := e.mustCreate(t, "pvc-midway", cloud.DiskOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := e.AttachDisk(ctxTimeout(t, 3*grace), d.ID, inst2)
		done <- err
	}()
	fakecloudtest.WaitFor(t, 10*time.Second, "attachment attaching", func(context.Context) (bool, error) {
		return hasAttachment(e.rawVolume(t, d.ID), inst2), nil
	})
	terminateInstance(t, e, inst2)
	start := time.Now()
	err := <-done
	took := time.Since(start)
	t.Logf("attach answered %v after the terminate: %v", took.Round(time.Millisecond), err)
	wantKinds(t, err, cloud.ErrInstanceGone, cloud.ErrNotFound)
	if took >= grace {
		t.Errorf("attach answered after %v, when the grace for a missing attachment (%v) had run out", took, grace)
	}
}
