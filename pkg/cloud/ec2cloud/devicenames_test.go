package ec2cloud

import (
	"context"
	"errors"
	"regexp"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
)

func TestDeviceNames(t *testing.T) {
	valid := regexp.MustCompile(`^/dev/xvd[a-d][a-z]$`)
	seen := map[string]bool{}
	for _, n := range deviceNames {
		if !valid.MatchString(n) || seen[n] {
			t.Errorf("bad or repeated device name %q", n)
		}
		seen[n] = true
	}
	if deviceNames[0] != "/dev/xvdaa" || deviceNames[len(deviceNames)-1] != "/dev/xvddx" || len(deviceNames) != 102 {
		t.Errorf("series runs %s … %s (%d names), want /dev/xvdaa … /dev/xvddx (102)", deviceNames[0], deviceNames[len(deviceNames)-1], len(deviceNames))
	}
}

// fakeInstances answers the allocator's DescribeInstances with fixed devices and counts the calls.
type fakeInstances struct {
	devices map[string]map[string]string
	calls   int
}

func (f *fakeInstances) describe(_ context.Context, id string) (map[string]string, error) {
	f.calls++
	devs, ok := f.devices[id]
	if !ok {
		return nil, newError("get instance", cloud.ErrNotFound, "no instance %s", id)
	}
	out := map[string]string{}
	for k, v := range devs {
		out[k] = v
	}
	return out, nil
}

func TestDeviceAllocator(t *testing.T) {
	ctx := context.Background()
	f := &fakeInstances{devices: map[string]map[string]string{
		"i-1": {"/dev/xvda": "", "/dev/xvdaa": "vol-old"},
	}}
	a := newDeviceAllocator(f.describe)

	d1, err := a.allocate(ctx, "i-1", "vol-1")
	if err != nil || d1 != "/dev/xvdab" {
		t.Fatalf("first allocation = %q, %v; want /dev/xvdab (xvdaa is taken)", d1, err)
	}
	if again, _ := a.allocate(ctx, "i-1", "vol-1"); again != d1 {
		t.Errorf("a volume holding a name got %q, want its own %q", again, d1)
	}
	d2, _ := a.allocate(ctx, "i-1", "vol-2")
	if d2 != "/dev/xvdac" {
		t.Errorf("second allocation = %q, want /dev/xvdac", d2)
	}
	a.release("i-1", "vol-1")
	// Round robin: the name just released is not handed out again at once.
	if d3, _ := a.allocate(ctx, "i-1", "vol-3"); d3 != "/dev/xvdad" {
		t.Errorf("allocation after a release = %q, want /dev/xvdad", d3)
	}
	// EC2 said a name is in use: it stays taken, and the volume moves on.
	a.takenElsewhere("i-1", "/dev/xvdae")
	if d4, _ := a.allocate(ctx, "i-1", "vol-4"); d4 != "/dev/xvdaf" {
		t.Errorf("allocation after takenElsewhere = %q, want /dev/xvdaf", d4)
	}
	a.adopt("i-1", "vol-4", "/dev/xvdcz")
	if d, _ := a.allocate(ctx, "i-1", "vol-4"); d != "/dev/xvdcz" {
		t.Errorf("adopted volume got %q, want /dev/xvdcz", d)
	}
	if f.calls != 1 {
		t.Errorf("DescribeInstances calls = %d, want 1 (learned once)", f.calls)
	}

	// An instance EC2 does not know gets a name all the same: AttachVolume's own answer tells the caller,
	// which then forgets the instance.
	if d, err := a.allocate(ctx, "i-missing", "vol-1"); err != nil || d == "" {
		t.Errorf("unknown instance: %q, %v; want a name", d, err)
	}
	a.forget("i-missing")
	if _, ok := a.instances["i-missing"]; ok {
		t.Error("forgotten instance still tracked")
	}
}

// TestDeviceAllocatorObserves: what DescribeVolumes reports keeps the learned devices current, except for
// names changed locally after the call started.
func TestDeviceAllocatorObserves(t *testing.T) {
	ctx := context.Background()
	f := &fakeInstances{devices: map[string]map[string]string{"i-1": {"/dev/xvda": ""}}}
	a := newDeviceAllocator(f.describe)
	if d, _ := a.allocate(ctx, "i-1", "vol-1"); d != "/dev/xvdaa" {
		t.Fatalf("first allocation = %q", d)
	}
	// Attached behind our back: vol-x holds /dev/xvdab.
	a.observe(a.mark(), []volumeAttachments{{volumeID: "vol-x", devices: map[string]string{"i-1": "/dev/xvdab"}}})
	if d, _ := a.allocate(ctx, "i-1", "vol-2"); d != "/dev/xvdac" {
		t.Errorf("allocation after an observed attachment = %q, want /dev/xvdac", d)
	}
	// Detached behind our back: the name is free again (the cursor has moved on, so it comes round later).
	a.observe(a.mark(), []volumeAttachments{{volumeID: "vol-x", devices: map[string]string{}}})
	if use, ok := a.instances["i-1"].inUse["/dev/xvdab"]; ok {
		t.Errorf("/dev/xvdab still held by %+v after vol-x was seen detached", use)
	}
	// A call that started before a local change says nothing about that name.
	mark := a.mark()
	a.release("i-1", "vol-2")
	a.observe(mark, []volumeAttachments{{volumeID: "vol-2", devices: map[string]string{"i-1": "/dev/xvdac"}}})
	if _, ok := a.instances["i-1"].inUse["/dev/xvdac"]; ok {
		t.Error("a stale observation took back a name released since")
	}
	// Our own allocation is not freed by an observation that does not show it yet (the attach is on its way).
	a.observe(a.mark(), []volumeAttachments{{volumeID: "vol-1", devices: map[string]string{}}})
	if use := a.instances["i-1"].inUse["/dev/xvdaa"]; use.volumeID != "vol-1" {
		t.Errorf("/dev/xvdaa = %+v, want still vol-1's", use)
	}
	if f.calls != 1 {
		t.Errorf("DescribeInstances calls = %d, want 1", f.calls)
	}
}

func TestDeviceAllocatorRunsOut(t *testing.T) {
	ctx := context.Background()
	full := map[string]string{}
	for _, n := range deviceNames {
		full[n] = "vol-x"
	}
	f := &fakeInstances{devices: map[string]map[string]string{"i-1": full}}
	a := newDeviceAllocator(f.describe)
	if _, err := a.allocate(ctx, "i-1", "vol-1"); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Fatalf("full instance: %v, want ErrLimitExceeded", err)
	}
	if f.calls != 2 {
		t.Errorf("DescribeInstances calls = %d, want 2 (learn, then learn again before giving up)", f.calls)
	}
	// Names freed behind the allocator's back are found by learning again.
	delete(full, "/dev/xvdbb")
	for n := range full {
		full[n] = ""
	}
	if d, err := a.allocate(ctx, "i-1", "vol-1"); err != nil || d != "/dev/xvdbb" {
		t.Fatalf("after a name was freed: %q, %v; want /dev/xvdbb", d, err)
	}
}

// TestDeviceAllocatorForgottenInstance: an instance forgotten between its learn and the pick (a concurrent
// attach to it was told it does not exist) is not found by this attach either; nothing panics.
func TestDeviceAllocatorForgottenInstance(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		run  func(a *deviceAllocator) error
	}{
		{"learn, forget, pick", func(a *deviceAllocator) error {
			if err := a.learn(ctx, "i-1", false); err != nil {
				return err
			}
			a.forget("i-1")
			_, _, err := a.pick("i-1", "vol-1")
			return err
		}},
		{"forgotten during allocate's learn", func(a *deviceAllocator) error {
			_, err := a.allocate(ctx, "i-1", "vol-1")
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var a *deviceAllocator
			a = newDeviceAllocator(func(context.Context, string) (map[string]string, error) {
				// The concurrent attach's refusal lands while this learn is in flight.
				defer a.forget("i-1")
				return map[string]string{"/dev/xvda": ""}, nil
			})
			err := tc.run(a)
			if !errors.Is(err, cloud.ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		})
	}
}
