package ec2cloud

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// TestCreationOutcome covers the state classifier of CreateDisk's wait, including the error state that
// fakecloud's API cannot produce (TestCreateDiskErrorStateDeletesDisk drives it end to end through a proxy).
func TestCreationOutcome(t *testing.T) {
	cases := []struct {
		state    ec2types.VolumeState
		done     bool
		wantKind error
	}{
		{ec2types.VolumeStateCreating, false, nil},
		{"", false, nil},
		{ec2types.VolumeStateAvailable, true, nil},
		{ec2types.VolumeStateInUse, true, nil},
		{ec2types.VolumeStateError, false, cloud.ErrFailed},
		{ec2types.VolumeStateDeleting, false, cloud.ErrFailed},
		{ec2types.VolumeStateDeleted, false, cloud.ErrFailed},
	}
	for _, tc := range cases {
		done, err := creationOutcome(tc.state)
		if done != tc.done || (tc.wantKind == nil) != (err == nil) || (tc.wantKind != nil && !errors.Is(err, tc.wantKind)) {
			t.Errorf("creationOutcome(%q) = %v, %v; want %v, %v", tc.state, done, err, tc.done, tc.wantKind)
		}
	}
}

func TestAttachOutcome(t *testing.T) {
	att := func(state ec2types.VolumeAttachmentState, dev string) ec2types.VolumeAttachment {
		return ec2types.VolumeAttachment{VolumeId: aws.String("vol-1"), InstanceId: aws.String("i-1"), Device: aws.String(dev), State: state}
	}
	cases := []struct {
		name     string
		a        ec2types.VolumeAttachment
		done     bool
		wantKind error
	}{
		{"attaching", att(ec2types.VolumeAttachmentStateAttaching, "/dev/xvdaa"), false, nil},
		{"attached", att(ec2types.VolumeAttachmentStateAttached, "/dev/xvdaa"), true, nil},
		{"attached under another device", att(ec2types.VolumeAttachmentStateAttached, "/dev/xvdab"), false, cloud.ErrFailed},
		{"detaching", att(ec2types.VolumeAttachmentStateDetaching, "/dev/xvdaa"), false, cloud.ErrIncorrectState},
		{"busy", att(ec2types.VolumeAttachmentStateBusy, "/dev/xvdaa"), false, cloud.ErrIncorrectState},
	}
	for _, tc := range cases {
		done, err := attachOutcome(tc.a, "/dev/xvdaa")
		if done != tc.done || (tc.wantKind == nil) != (err == nil) || (tc.wantKind != nil && !errors.Is(err, tc.wantKind)) {
			t.Errorf("%s: attachOutcome = %v, %v; want %v, %v", tc.name, done, err, tc.done, tc.wantKind)
		}
	}
}

func TestDetachOutcome(t *testing.T) {
	cases := []struct {
		state       ec2types.VolumeAttachmentState
		done, still bool
	}{
		{ec2types.VolumeAttachmentStateDetached, true, false},
		{ec2types.VolumeAttachmentStateDetaching, false, false},
		{ec2types.VolumeAttachmentStateBusy, false, false},
		{ec2types.VolumeAttachmentStateAttached, false, true},
		{ec2types.VolumeAttachmentStateAttaching, false, true},
	}
	for _, tc := range cases {
		if done, still := detachOutcome(tc.state); done != tc.done || still != tc.still {
			t.Errorf("detachOutcome(%q) = %v, %v; want %v, %v", tc.state, done, still, tc.done, tc.still)
		}
	}
}

func TestModificationAndSnapshotOutcome(t *testing.T) {
	for state, want := range map[ec2types.VolumeModificationState]struct {
		done   bool
		failed bool
	}{
		ec2types.VolumeModificationStateModifying:  {false, false},
		ec2types.VolumeModificationStateOptimizing: {true, false},
		ec2types.VolumeModificationStateCompleted:  {true, false},
		ec2types.VolumeModificationStateFailed:     {false, true},
	} {
		done, err := modificationOutcome(ec2types.VolumeModification{VolumeId: aws.String("vol-1"), ModificationState: state})
		if done != want.done || errors.Is(err, cloud.ErrFailed) != want.failed {
			t.Errorf("modificationOutcome(%q) = %v, %v", state, done, err)
		}
	}
	for state, want := range map[ec2types.SnapshotState]struct {
		done   bool
		failed bool
	}{
		ec2types.SnapshotStatePending:   {false, false},
		ec2types.SnapshotStateCompleted: {true, false},
		ec2types.SnapshotStateError:     {false, true},
	} {
		done, err := snapshotOutcome(ec2types.Snapshot{SnapshotId: aws.String("snap-1"), State: state})
		if done != want.done || errors.Is(err, cloud.ErrFailed) != want.failed {
			t.Errorf("snapshotOutcome(%q) = %v, %v", state, done, err)
		}
	}
}

func TestGraceClock(t *testing.T) {
	g := graceClock{grace: time.Second}
	t0 := time.Unix(1000, 0)
	if g.expired(true, t0) || g.expired(true, t0.Add(time.Second)) {
		t.Fatal("expired within the grace")
	}
	if !g.expired(true, t0.Add(2*time.Second)) {
		t.Fatal("not expired after the grace")
	}
	if g.expired(false, t0.Add(3*time.Second)) || g.expired(true, t0.Add(3*time.Second)) {
		t.Fatal("being seen did not reset the grace")
	}
}

func TestWaitOptionsDefaultsAndSchedule(t *testing.T) {
	w := WaitOptions{}.withDefaults()
	if w.Initial <= 0 || w.Multiplier < 1 || w.Max < w.Initial || w.ConsistencyGrace <= 0 || w.BatchSize <= 0 || w.FetchTimeout <= 0 {
		t.Fatalf("defaults incomplete: %+v", w)
	}
	w = WaitOptions{Initial: 10 * time.Millisecond, Multiplier: 2, Max: 50 * time.Millisecond, Jitter: -1}.withDefaults()
	bo := w.newBackOff()
	want := []time.Duration{10, 20, 40, 50, 50}
	for i, ms := range want {
		if got := bo.NextBackOff(); got != ms*time.Millisecond {
			t.Errorf("interval %d = %v, want %v", i, got, ms*time.Millisecond)
		}
	}
	// After a sleep through an estimate, a tenth of it, within [Initial, Max].
	for _, c := range []struct{ estimate, want time.Duration }{
		{50 * time.Millisecond, 10 * time.Millisecond},
		{300 * time.Millisecond, 30 * time.Millisecond},
		{time.Minute, 50 * time.Millisecond},
	} {
		if got := w.settleInterval(c.estimate); got != c.want {
			t.Errorf("settle interval after %v = %v, want %v", c.estimate, got, c.want)
		}
	}
}
