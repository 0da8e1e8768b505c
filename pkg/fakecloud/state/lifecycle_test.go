package state

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/store"
)

const (
	testInstance = "i-0a000000000000001"
	otherZone    = "i-0b000000000000002"
	tinyInstance = "i-0c000000000000003" // holds one volume
	transition   = time.Minute           // every instance transition, on the test clock
)

// mountedBackend is the file backend with a guest's view: a volume marked mounted refuses a plain detach (busy),
// as a mounted loop device does; every Detach is recorded with its force flag. attachErr, when set, fails
// every Attach (a host without free loop devices); attaches counts the calls.
type mountedBackend struct {
	blockdev.Backend
	mu        sync.Mutex
	mounted   map[string]bool
	detaches  []detachCall
	attachErr error
	attaches  int
}

func (b *mountedBackend) Attach(ctx context.Context, volumeID string) (string, error) {
	b.mu.Lock()
	b.attaches++
	err := b.attachErr
	b.mu.Unlock()
	if err != nil {
		return "", err
	}
	return b.Backend.Attach(ctx, volumeID)
}

func (b *mountedBackend) failAttaches(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attachErr = err
}

func (b *mountedBackend) attachCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.attaches
}

type detachCall struct {
	volumeID string
	force    bool
}

func (b *mountedBackend) Detach(ctx context.Context, volumeID string, force bool) error {
	b.mu.Lock()
	b.detaches = append(b.detaches, detachCall{volumeID, force})
	busy := b.mounted[volumeID] && !force
	b.mu.Unlock()
	if busy {
		return blockdev.ErrBusy
	}
	return b.Backend.Detach(ctx, volumeID, force)
}

func (b *mountedBackend) mount(volumeID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mounted[volumeID] = true
}

func (b *mountedBackend) calls() []detachCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.detaches)
}

// testCloud is a State on the file backend with a hand-moved clock, instance transitions of a minute and instant
// volume transitions. holds is how many attachments a counted stuck fault still holds; stuck holds them all.
type testCloud struct {
	t       *testing.T
	s       *State
	clock   *testutil.Clock
	backend *mountedBackend
	store   *store.Store
	cfg     Config

	mu    sync.Mutex
	holds int
	stuck bool
}

func newTestCloud(t *testing.T) *testCloud {
	t.Helper()
	dir := t.TempDir()
	fb, err := blockdev.NewFileBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "state.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCloud{t: t, clock: testutil.NewClock(), backend: &mountedBackend{Backend: fb, mounted: map[string]bool{}}, store: st,
		cfg: Config{
			Region: "us-east-1",
			Zones:  []Zone{{Name: "us-east-1a", ID: "use1-az1"}, {Name: "us-east-1b", ID: "use1-az2"}},
			Instances: []InstanceSpec{{ID: testInstance, Zone: "us-east-1a"}, {ID: otherZone, Zone: "us-east-1b"},
				{ID: tinyInstance, Zone: "us-east-1a", AttachmentLimit: 1}},
			Durations:           Durations{InstanceStart: transition, InstanceStop: transition, InstanceTerminate: transition},
			TerminatedRetention: time.Hour,
		}}
	c.start()
	t.Cleanup(func() {
		c.s.Close()
		_ = st.Close()
	})
	return c
}

func (c *testCloud) start() {
	c.t.Helper()
	s, err := New(c.cfg, Options{Backend: c.backend, Store: c.store, Clock: c.clock,
		Stuck: func(string) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.stuck
		},
		HoldNext: func(tr string) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			if tr != TransitionAttach || c.holds == 0 {
				return false
			}
			c.holds--
			return true
		}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.s = s
}

func (c *testCloud) setHolds(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holds = n
}

func (c *testCloud) setStuck(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stuck = on
}

// restart stops the State and starts another on the same store and backend, as a fakecloud restart does.
func (c *testCloud) restart() {
	c.t.Helper()
	c.s.Close()
	c.start()
}

// waitFor polls cond, each look advancing due transitions; block I/O jobs run on workers of their own.
func (c *testCloud) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// instanceState is the instance's state, or "gone" once DescribeInstances no longer knows it.
func (c *testCloud) instanceState(id string) string {
	c.t.Helper()
	views, _, err := c.s.DescribeInstances(DescribeInput{IDs: []string{id}})
	if ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound) {
		return "gone"
	}
	if err != nil || len(views) != 1 {
		c.t.Fatalf("DescribeInstances %s: %v, %v", id, views, err)
	}
	return views[0].State
}

// volume is the volume's record, or a zero one with State "gone".
func (c *testCloud) volume(id string) Volume {
	c.t.Helper()
	vols, _, err := c.s.DescribeVolumes(DescribeInput{IDs: []string{id}})
	if ec2err.HasCode(err, ec2err.CodeInvalidVolumeNotFound) {
		return Volume{State: "gone"}
	}
	if err != nil || len(vols) != 1 {
		c.t.Fatalf("DescribeVolumes %s: %v, %v", id, vols, err)
	}
	return vols[0]
}

func (c *testCloud) newVolume(zone string) string {
	c.t.Helper()
	size := int32(1)
	v, err := c.s.CreateVolume(CreateVolumeInput{SizeGiB: &size, Zone: zone})
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("volume available", func() bool { return c.volume(v.ID).State == VolumeAvailable })
	return v.ID
}

// attachmentState is the state of the volume's only attachment, or "none".
func (c *testCloud) attachmentState(volumeID string) string {
	c.t.Helper()
	v := c.volume(volumeID)
	if len(v.Attachments) == 0 {
		return "none"
	}
	return v.Attachments[0].State
}

func (c *testCloud) attach(volumeID, instanceID, device string) {
	c.t.Helper()
	if _, err := c.s.AttachVolume(AttachInput{VolumeID: volumeID, InstanceID: instanceID, Device: device}); err != nil {
		c.t.Fatalf("AttachVolume %s to %s: %v", volumeID, instanceID, err)
	}
	c.waitFor("attached", func() bool { return c.attachmentState(volumeID) == AttachAttached })
}

// to brings testInstance from running to the named state.
func (c *testCloud) to(state string) {
	c.t.Helper()
	var err error
	switch state {
	case InstanceRunning:
	case InstanceStopping:
		_, err = c.s.StopInstances([]string{testInstance}, false, false)
	case InstanceStopped:
		c.to(InstanceStopping)
		c.clock.Advance(transition)
	case InstancePending:
		c.to(InstanceStopped)
		_, err = c.s.StartInstances([]string{testInstance}, false)
	case InstanceShuttingDown:
		_, err = c.s.TerminateInstances([]string{testInstance}, false, false)
	case InstanceTerminated:
		c.to(InstanceShuttingDown)
		c.clock.Advance(transition)
	}
	if err != nil {
		c.t.Fatalf("bringing the instance to %s: %v", state, err)
	}
	if got := c.instanceState(testInstance); got != state {
		c.t.Fatalf("instance is %s, want %s", got, state)
	}
}

// TestInstanceTransitions: every action from every state, with EC2's reply (previous → current), its refusals,
// the state the next look shows (a forced stop needs no time) and the state once the transition's time passed.
func TestInstanceTransitions(t *testing.T) {
	start := func(c *testCloud) ([]InstanceStateChange, error) {
		return c.s.StartInstances([]string{testInstance}, false)
	}
	stop := func(force bool) func(c *testCloud) ([]InstanceStateChange, error) {
		return func(c *testCloud) ([]InstanceStateChange, error) {
			return c.s.StopInstances([]string{testInstance}, force, false)
		}
	}
	terminate := func(c *testCloud) ([]InstanceStateChange, error) {
		return c.s.TerminateInstances([]string{testInstance}, false, false)
	}
	tests := []struct {
		from, action string
		do           func(*testCloud) ([]InstanceStateChange, error)
		code         string // the refusal, if any
		current      string // in the reply
		now, later   string // seen at once, and once the transition's time has passed
	}{
		{InstanceRunning, "start", start, "", InstanceRunning, InstanceRunning, InstanceRunning},
		{InstanceRunning, "stop", stop(false), "", InstanceStopping, InstanceStopping, InstanceStopped},
		{InstanceRunning, "stop force", stop(true), "", InstanceStopping, InstanceStopped, InstanceStopped},
		{InstanceRunning, "terminate", terminate, "", InstanceShuttingDown, InstanceShuttingDown, InstanceTerminated},
		{InstancePending, "start", start, "", InstancePending, InstancePending, InstanceRunning},
		{InstancePending, "stop", stop(false), ec2err.CodeIncorrectInstanceState, "", InstancePending, InstanceRunning},
		{InstancePending, "terminate", terminate, "", InstanceShuttingDown, InstanceShuttingDown, InstanceTerminated},
		{InstanceStopping, "start", start, ec2err.CodeIncorrectInstanceState, "", InstanceStopping, InstanceStopped},
		{InstanceStopping, "stop", stop(false), "", InstanceStopping, InstanceStopping, InstanceStopped},
		{InstanceStopping, "stop force", stop(true), "", InstanceStopping, InstanceStopped, InstanceStopped},
		{InstanceStopping, "terminate", terminate, "", InstanceShuttingDown, InstanceShuttingDown, InstanceTerminated},
		{InstanceStopped, "start", start, "", InstancePending, InstancePending, InstanceRunning},
		{InstanceStopped, "stop", stop(false), "", InstanceStopped, InstanceStopped, InstanceStopped},
		{InstanceStopped, "stop force", stop(true), "", InstanceStopped, InstanceStopped, InstanceStopped},
		{InstanceStopped, "terminate", terminate, "", InstanceShuttingDown, InstanceShuttingDown, InstanceTerminated},
		{InstanceShuttingDown, "start", start, ec2err.CodeIncorrectInstanceState, "", InstanceShuttingDown, InstanceTerminated},
		{InstanceShuttingDown, "stop", stop(false), ec2err.CodeIncorrectInstanceState, "", InstanceShuttingDown, InstanceTerminated},
		{InstanceShuttingDown, "terminate", terminate, "", InstanceShuttingDown, InstanceShuttingDown, InstanceTerminated},
		{InstanceTerminated, "start", start, ec2err.CodeIncorrectInstanceState, "", InstanceTerminated, InstanceTerminated},
		{InstanceTerminated, "stop", stop(true), ec2err.CodeIncorrectInstanceState, "", InstanceTerminated, InstanceTerminated},
		{InstanceTerminated, "terminate", terminate, "", InstanceTerminated, InstanceTerminated, InstanceTerminated},
	}
	for _, tc := range tests {
		t.Run(tc.from+" "+tc.action, func(t *testing.T) {
			c := newTestCloud(t)
			c.to(tc.from)
			changes, err := tc.do(c)
			switch {
			case tc.code != "":
				if !ec2err.HasCode(err, tc.code) {
					t.Fatalf("err = %v, want %s", err, tc.code)
				}
			case err != nil:
				t.Fatal(err)
			default:
				want := []InstanceStateChange{{InstanceID: testInstance, Previous: tc.from, Current: tc.current}}
				if !slices.Equal(changes, want) {
					t.Errorf("reply %+v, want %+v", changes, want)
				}
			}
			if got := c.instanceState(testInstance); got != tc.now {
				t.Errorf("state at once %s, want %s", got, tc.now)
			}
			c.clock.Advance(transition)
			if got := c.instanceState(testInstance); got != tc.later {
				t.Errorf("state later %s, want %s", got, tc.later)
			}
		})
	}
}

// TestInstanceRequests: bad requests are refused as a whole, before anything changes.
func TestInstanceRequests(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
		dry  bool
		code string
	}{
		{"unknown", []string{"i-0ffffffffffffffff"}, false, ec2err.CodeInvalidInstanceIDNotFound},
		{"one of two unknown", []string{testInstance, "i-0ffffffffffffffff"}, false, ec2err.CodeInvalidInstanceIDNotFound},
		{"malformed", []string{"node-1"}, false, ec2err.CodeInvalidInstanceIDMalformed},
		{"none", nil, false, ec2err.CodeMissingParameter},
		{"dry run", []string{testInstance}, true, ec2err.CodeDryRunOperation},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCloud(t)
			actions := map[string]func() error{
				"stop":      func() error { _, err := c.s.StopInstances(tc.ids, true, tc.dry); return err },
				"terminate": func() error { _, err := c.s.TerminateInstances(tc.ids, true, tc.dry); return err },
				"start":     func() error { _, err := c.s.StartInstances(tc.ids, tc.dry); return err },
			}
			for name, do := range actions {
				if err := do(); !ec2err.HasCode(err, tc.code) {
					t.Errorf("%s: err = %v, want %s", name, err, tc.code)
				}
			}
			if got := c.instanceState(testInstance); got != InstanceRunning {
				t.Errorf("a refused request left the instance %s", got)
			}
		})
	}
	c := newTestCloud(t)
	changes, err := c.s.StopInstances([]string{testInstance, testInstance, otherZone}, false, false)
	if err != nil || len(changes) != 2 || changes[0].InstanceID != testInstance || changes[1].InstanceID != otherZone {
		t.Errorf("stop of a repeated ID and another = %+v, %v; want each once, in order", changes, err)
	}
}

// TestTerminatedInstanceVanishes: a terminated instance stays visible for the retention, then is unknown.
func TestTerminatedInstanceVanishes(t *testing.T) {
	c := newTestCloud(t)
	c.to(InstanceTerminated)
	c.clock.Advance(time.Hour - time.Second)
	if got := c.instanceState(testInstance); got != InstanceTerminated {
		t.Fatalf("within the retention: %s", got)
	}
	c.clock.Advance(time.Second)
	if got := c.instanceState(testInstance); got != "gone" {
		t.Errorf("past the retention: %s, want gone", got)
	}
	if _, err := c.s.TerminateInstances([]string{testInstance}, false, false); !ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound) {
		t.Errorf("terminate of a vanished instance: %v", err)
	}
}

// TestAttachByInstanceState: volumes attach to running, stopping and stopped instances, not to ones being
// terminated; the attachment limit holds whatever the state.
func TestAttachByInstanceState(t *testing.T) {
	for _, tc := range []struct {
		state, code string
	}{
		{InstanceRunning, ""},
		{InstancePending, ""},
		{InstanceStopping, ""},
		{InstanceStopped, ""},
		{InstanceShuttingDown, ec2err.CodeIncorrectInstanceState},
		{InstanceTerminated, ec2err.CodeIncorrectInstanceState},
	} {
		t.Run(tc.state, func(t *testing.T) {
			c := newTestCloud(t)
			vol := c.newVolume("us-east-1a")
			c.to(tc.state)
			_, err := c.s.AttachVolume(AttachInput{VolumeID: vol, InstanceID: testInstance, Device: "/dev/xvdba"})
			if tc.code != "" {
				if !ec2err.HasCode(err, tc.code) {
					t.Errorf("err = %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.waitFor("attached", func() bool { return c.attachmentState(vol) == AttachAttached })
		})
	}
	c := newTestCloud(t)
	first, second := c.newVolume("us-east-1a"), c.newVolume("us-east-1a")
	c.attach(first, tinyInstance, "/dev/xvdba")
	if _, err := c.s.StopInstances([]string{tinyInstance}, true, false); err != nil {
		t.Fatal(err)
	}
	_, err := c.s.AttachVolume(AttachInput{VolumeID: second, InstanceID: tinyInstance, Device: "/dev/xvdbb"})
	if !ec2err.HasCode(err, ec2err.CodeAttachmentLimitExceeded) {
		t.Errorf("attach beyond the limit of a stopped instance: %v, want %s", err, ec2err.CodeAttachmentLimitExceeded)
	}
}

// TestStopKeepsAttachments: a stopped instance keeps its volumes in use and attached, across its start too; a
// detach from it completes even though the device is still mounted (no guest holds it: the release is forced).
func TestStopKeepsAttachments(t *testing.T) {
	c := newTestCloud(t)
	kept, released := c.newVolume("us-east-1a"), c.newVolume("us-east-1a")
	c.attach(kept, testInstance, "/dev/xvdba")
	c.attach(released, testInstance, "/dev/xvdbb")
	c.backend.mount(released)
	c.to(InstanceStopped)
	for _, id := range []string{kept, released} {
		if v := c.volume(id); v.State != VolumeInUse || v.Attachments[0].State != AttachAttached {
			t.Errorf("%s on a stopped instance: %s, %+v", id, v.State, v.Attachments)
		}
	}
	if _, err := c.s.DetachVolume(DetachInput{VolumeID: released, InstanceID: testInstance}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("detach from the stopped instance", func() bool { return c.volume(released).State == VolumeAvailable })
	if calls := c.backend.calls(); !slices.Contains(calls, detachCall{released, true}) {
		t.Errorf("detach calls %+v, want a forced one for %s", calls, released)
	}
	if _, err := c.s.StartInstances([]string{testInstance}, false); err != nil {
		t.Fatal(err)
	}
	c.clock.Advance(transition)
	if got := c.instanceState(testInstance); got != InstanceRunning {
		t.Fatalf("instance %s after start", got)
	}
	if v := c.volume(kept); v.State != VolumeInUse || v.Attachments[0].State != AttachAttached {
		t.Errorf("after the start: %s, %+v", v.State, v.Attachments)
	}
}

// TestBusyDetachCompletesOnStop: a detach refused busy by a mounted device on a running instance completes once
// the instance stops, as EC2's does when the guest shuts down.
func TestBusyDetachCompletesOnStop(t *testing.T) {
	c := newTestCloud(t)
	vol := c.newVolume("us-east-1a")
	c.attach(vol, testInstance, "/dev/xvdba")
	c.backend.mount(vol)
	if _, err := c.s.DetachVolume(DetachInput{VolumeID: vol}); err != nil {
		t.Fatal(err)
	}
	c.waitFor("busy", func() bool { return c.attachmentState(vol) == AttachBusy })
	c.to(InstanceStopping)
	if got := c.attachmentState(vol); got != AttachBusy {
		t.Errorf("while the guest is still up: %s, want busy", got)
	}
	c.clock.Advance(transition)
	c.waitFor("detach on stop", func() bool { return c.volume(vol).State == VolumeAvailable })
}

// TestTerminateEndsAttachments: termination ends every attachment, forcing the release of mounted devices; a
// DeleteOnTermination volume is deleted, the others are available; the instance is terminated only once its
// volumes are off it.
func TestTerminateEndsAttachments(t *testing.T) {
	c := newTestCloud(t)
	keep, drop, held := c.newVolume("us-east-1a"), c.newVolume("us-east-1a"), c.newVolume("us-east-1a")
	c.attach(keep, testInstance, "/dev/xvdba")
	c.attach(drop, testInstance, "/dev/xvdbb")
	c.backend.mount(keep)
	if err := c.s.ModifyBlockDevices(testInstance, []BlockDeviceChange{{Device: "/dev/xvdbb", DeleteOnTermination: true}}, false); err != nil {
		t.Fatal(err)
	}
	if v := c.volume(drop); !v.Attachments[0].DeleteOnTermination {
		t.Fatalf("DeleteOnTermination not set: %+v", v.Attachments)
	}
	// A third volume is held attaching by a counted stuck fault: termination ends it too.
	c.setHolds(1)
	if _, err := c.s.AttachVolume(AttachInput{VolumeID: held, InstanceID: testInstance, Device: "/dev/xvdbc"}); err != nil {
		t.Fatal(err)
	}
	// Detaches are held, so the instance waits in shutting-down for its volumes past its own time.
	c.setStuck(true)
	c.to(InstanceShuttingDown)
	c.clock.Advance(transition)
	if got := c.instanceState(testInstance); got != InstanceShuttingDown {
		t.Errorf("with volumes still detaching the instance is %s, want shutting-down", got)
	}
	c.setStuck(false)
	c.waitFor("terminated", func() bool { return c.instanceState(testInstance) == InstanceTerminated })
	for id, want := range map[string]string{keep: VolumeAvailable, drop: "gone", held: VolumeAvailable} {
		c.waitFor(id+" "+want, func() bool { return c.volume(id).State == want })
	}
	if calls := c.backend.calls(); !slices.Contains(calls, detachCall{keep, true}) {
		t.Errorf("detach calls %+v, want a forced one for the mounted %s", calls, keep)
	}
	if dev := c.backend.DevicePath(keep); dev != "" {
		t.Errorf("%s still has host device %s", keep, dev)
	}
}

// TestModifyBlockDevices: only a device that is mapped can be modified, and a refused request changes nothing.
func TestModifyBlockDevices(t *testing.T) {
	c := newTestCloud(t)
	vol := c.newVolume("us-east-1a")
	c.attach(vol, testInstance, "/dev/xvdba")
	for _, tc := range []struct {
		name    string
		changes []BlockDeviceChange
		dry     bool
		code    string
	}{
		{"unmapped device", []BlockDeviceChange{{Device: "/dev/xvdba", DeleteOnTermination: true}, {Device: "/dev/xvdbz", DeleteOnTermination: true}}, false, ec2err.CodeInvalidInstanceAttributeValue},
		{"other volume", []BlockDeviceChange{{Device: "/dev/xvdba", VolumeID: "vol-0ffffffffffffffff", DeleteOnTermination: true}}, false, ec2err.CodeInvalidInstanceAttributeValue},
		{"dry run", []BlockDeviceChange{{Device: "/dev/xvdba", DeleteOnTermination: true}}, true, ec2err.CodeDryRunOperation},
	} {
		if err := c.s.ModifyBlockDevices(testInstance, tc.changes, tc.dry); !ec2err.HasCode(err, tc.code) {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.code)
		}
		if c.volume(vol).Attachments[0].DeleteOnTermination {
			t.Errorf("%s: a refused request set DeleteOnTermination", tc.name)
		}
	}
	if err := c.s.ModifyBlockDevices("i-0ffffffffffffffff", nil, false); !ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound) {
		t.Errorf("unknown instance: %v", err)
	}
}

// TestHeldAttachments pins both forms of the stuck attach fault: a counted hold keeps exactly the attachments it
// took attaching until they are detached (forced or not), while later ones proceed; the plain form holds every
// attachment while it is set and lets them all go when lifted.
func TestHeldAttachments(t *testing.T) {
	for _, force := range []bool{false, true} {
		c := newTestCloud(t)
		held, next := c.newVolume("us-east-1a"), c.newVolume("us-east-1a")
		c.setHolds(1)
		if _, err := c.s.AttachVolume(AttachInput{VolumeID: held, InstanceID: testInstance, Device: "/dev/xvdba"}); err != nil {
			t.Fatal(err)
		}
		c.attach(next, testInstance, "/dev/xvdbb")
		c.clock.Advance(time.Hour)
		if got := c.attachmentState(held); got != AttachAttaching {
			t.Fatalf("held attachment is %s, want attaching", got)
		}
		c.restart()
		if got := c.attachmentState(held); got != AttachAttaching {
			t.Fatalf("after a restart the held attachment is %s, want attaching", got)
		}
		d, err := c.s.DetachVolume(DetachInput{VolumeID: held, Force: force})
		if err != nil || d.State != AttachDetaching {
			t.Fatalf("DetachVolume (force %v) = %+v, %v", force, d, err)
		}
		c.waitFor("held attachment detached", func() bool { return c.volume(held).State == VolumeAvailable })
		if dev := c.backend.DevicePath(held); dev != "" {
			t.Errorf("held volume has host device %s", dev)
		}
		// Attached again, it proceeds: the hold was for that one attachment.
		c.attach(held, testInstance, "/dev/xvdba")
	}

	c := newTestCloud(t)
	a, b := c.newVolume("us-east-1a"), c.newVolume("us-east-1a")
	c.setStuck(true)
	for i, id := range []string{a, b} {
		if _, err := c.s.AttachVolume(AttachInput{VolumeID: id, InstanceID: testInstance, Device: []string{"/dev/xvdba", "/dev/xvdbb"}[i]}); err != nil {
			t.Fatal(err)
		}
	}
	c.clock.Advance(time.Hour)
	if c.attachmentState(a) != AttachAttaching || c.attachmentState(b) != AttachAttaching {
		t.Fatalf("plain stuck attach: %s, %s; want both attaching", c.attachmentState(a), c.attachmentState(b))
	}
	c.setStuck(false)
	c.waitFor("both attached once lifted", func() bool {
		return c.attachmentState(a) == AttachAttached && c.attachmentState(b) == AttachAttached
	})
}

// TestInstanceStateDurable: instance states and their due times survive a restart, and transitions resume.
func TestInstanceStateDurable(t *testing.T) {
	c := newTestCloud(t)
	vol := c.newVolume("us-east-1a")
	c.attach(vol, testInstance, "/dev/xvdba")
	if err := c.s.ModifyBlockDevices(testInstance, []BlockDeviceChange{{Device: "/dev/xvdba", DeleteOnTermination: true}}, false); err != nil {
		t.Fatal(err)
	}
	c.to(InstanceStopping)
	if _, err := c.s.StopInstances([]string{otherZone}, true, false); err != nil {
		t.Fatal(err)
	}
	c.restart()
	if got := c.instanceState(testInstance); got != InstanceStopping {
		t.Errorf("after a restart: %s, want stopping", got)
	}
	if got := c.instanceState(otherZone); got != InstanceStopped {
		t.Errorf("after a restart: %s, want stopped", got)
	}
	if v := c.volume(vol); !v.Attachments[0].DeleteOnTermination || v.Attachments[0].State != AttachAttached {
		t.Errorf("attachment after a restart: %+v", v.Attachments)
	}
	c.clock.Advance(transition)
	if got := c.instanceState(testInstance); got != InstanceStopped {
		t.Errorf("resumed stop: %s, want stopped", got)
	}
	// Registering a known instance again (a harness at start) keeps its state.
	if in, err := c.s.RegisterInstance(InstanceSpec{ID: testInstance, Zone: "us-east-1a"}); err != nil || in.State != InstanceStopped {
		t.Errorf("RegisterInstance of a stopped instance: %+v, %v", in, err)
	}
}

// TestRemoveInstance: the admin removal terminates (attachments end, DeleteOnTermination applies) and forgets at
// once; registering the ID again launches a fresh instance.
func TestRemoveInstance(t *testing.T) {
	c := newTestCloud(t)
	vol := c.newVolume("us-east-1a")
	c.attach(vol, testInstance, "/dev/xvdba")
	if err := c.s.ModifyBlockDevices(testInstance, []BlockDeviceChange{{Device: "/dev/xvdba", DeleteOnTermination: true}}, false); err != nil {
		t.Fatal(err)
	}
	if err := c.s.RemoveInstance(testInstance); err != nil {
		t.Fatal(err)
	}
	if got := c.instanceState(testInstance); got != "gone" {
		t.Errorf("removed instance is %s", got)
	}
	c.waitFor("volume deleted on termination", func() bool { return c.volume(vol).State == "gone" })
	if err := c.s.RemoveInstance(testInstance); !ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound) {
		t.Errorf("second removal: %v", err)
	}
	in, err := c.s.RegisterInstance(InstanceSpec{ID: testInstance, Zone: "us-east-1a"})
	if err != nil || in.State != InstanceRunning {
		t.Errorf("registered again: %+v, %v", in, err)
	}
}

// TestFailingJobBacksOff: an attach whose device cannot be bound is retried with a delay that doubles from
// stuckPoll, not every stuckPoll (about thirty tries, and as many error lines, in three seconds); once the
// backend recovers, the attach completes.
func TestFailingJobBacksOff(t *testing.T) {
	c := newTestCloud(t)
	c.backend.failAttaches(errors.New("no free loop device"))
	vol := c.newVolume("us-east-1a")
	if _, err := c.s.AttachVolume(AttachInput{VolumeID: vol, InstanceID: testInstance, Device: "/dev/xvdba"}); err != nil {
		t.Fatal(err)
	}
	const window = 3 * time.Second
	time.Sleep(window)
	// 100+200+400+800+1600 ms of waits fit in the window: five or six tries.
	if n := c.backend.attachCalls(); n < 2 || n > 7 {
		t.Errorf("%d attach tries in %v; want a few, spaced by a doubling delay", n, window)
	} else {
		t.Logf("%d attach tries in %v", n, window)
	}
	c.backend.failAttaches(nil)
	c.waitFor("attached once the backend recovers", func() bool { return c.attachmentState(vol) == AttachAttached })
}
