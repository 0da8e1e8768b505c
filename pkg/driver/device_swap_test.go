package driver

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNodeRefusesDeviceOfAnotherVolume: a published block volume whose loop device the cloud has since bound to
// another volume (the volume itself now on another device) must not be reused through its old paths: a
// republish, stats and expand at the old target refuse the device, whose backing file is no longer the
// volume's, and a publish at a new target binds the volume's own device.
func TestNodeRefusesDeviceOfAnotherVolume(t *testing.T) {
	t.Parallel()
	m := newFakeMachine(t)
	e := newFakeEnv(t, m)
	const idA, idB = "vol-000000000000000a1", "vol-000000000000000b2"
	loop1 := m.loopVolume(idA, 1, gib)
	vc := blockCap(rwo)
	staging, target := e.path("staging"), e.path("target")
	e.mustStage(idA, staging, vc, nil)
	e.mustPublish(idA, staging, target, vc, false)

	// The swap: loop1 now serves B's file, and A is on loop2.
	rebind := func(name, volumeID string) {
		file := filepath.Join(m.sys.block.Root, name, "loop", "backing_file")
		must(t, os.WriteFile(file, []byte("/var/lib/fakecloud/volumes/"+volumeID+".img\n"), 0o644))
	}
	rebind(loop1.name, idB)
	loop2 := m.loopVolume(idA, 2, gib)

	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"republish at the old target", e.publishCall(idA, staging, target, vc, false), codes.AlreadyExists},
		{"stats at the old target", e.statsCall(idA, target), codes.NotFound},
		{"expand at the old target", e.expandCall(idA, target, vc), codes.NotFound},
	} {
		if got := status.Code(tc.call()); got != tc.want {
			t.Errorf("%s: code %v, want %v (the device there serves %s)", tc.name, got, tc.want, idB)
		}
	}
	other := e.path("other")
	e.mustPublish(idA, staging, other, vc, false)
	if got := m.mountsAt(other); len(got) != 1 {
		t.Fatalf("mounts at the new target: %v", got)
	}
	if d, err := m.deviceAt(other); err != nil || d != loop2 {
		t.Errorf("new target is %+v, %v; want A's device %s", d, err, loop2.node)
	}
}
