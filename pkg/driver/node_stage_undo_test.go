package driver

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kubeletUncertain are the codes kubelet's CSI client (pkg/volume/csi, isFinalError) takes as "the operation
// may still be in progress": after one it keeps the staging as uncertain, retries, and unstages at teardown.
// Any other code is final: kubelet takes the volume as not staged and never calls NodeUnstageVolume.
var kubeletUncertain = map[codes.Code]bool{codes.Canceled: true, codes.DeadlineExceeded: true, codes.Unavailable: true,
	codes.ResourceExhausted: true, codes.Aborted: true}

// TestNodeStageFailureAfterMount: every way a stage can fail after the staging path is mounted (growing xfs
// after a fresh mount, the same with an unmount that fails too, growing the xfs an earlier, crashed stage
// mounted) answers a final code only with the staging path unmounted, and otherwise a code kubelet takes as
// uncertain; the retry stages the volume.
func TestNodeStageFailureAfterMount(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000b01"
	failOnce := func(what string) func(string) error {
		failed := false
		return func(string) error {
			if failed {
				return nil
			}
			failed = true
			return errors.New(what + ": input/output error")
		}
	}
	tests := []struct {
		name         string
		mountedFirst bool // an earlier stage mounted the volume and crashed before growing it
		unmountFails bool
		wantMounted  bool
		want         codes.Code
	}{
		{name: "growing xfs fails after the mount", want: codes.Internal},
		{name: "growing xfs fails, and so does the unmount", unmountFails: true, wantMounted: true, want: codes.Aborted},
		{name: "growing xfs mounted by a crashed stage fails", mountedFirst: true, wantMounted: true, want: codes.Aborted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeMachine(t)
			d := m.loopVolume(vol, 1, gib)
			m.write(d, FSXFS, 0)
			e := newFakeEnv(t, m)
			staging := e.path("staging")
			if tc.mountedFirst {
				e.mustStage(vol, staging, mountCap(FSXFS, rwo), nil)
			}
			m.growHook = failOnce("xfs_growfs")
			if tc.unmountFails {
				m.unmountHook = failOnce("umount")
			}
			err := e.stage(vol, staging, mountCap(FSXFS, rwo), nil)
			code := status.Code(err)
			mounted := len(m.mountsAt(staging)) > 0
			if code != tc.want || mounted != tc.wantMounted {
				t.Errorf("stage: %v, staging path mounted: %v; want %s, mounted: %v", err, mounted, tc.want, tc.wantMounted)
			}
			if code == codes.OK || mounted && !kubeletUncertain[code] {
				t.Errorf("stage failed with the staging path mounted (%v) and code %s, which kubelet takes as final", mounted, code)
			}
			e.mustStage(vol, staging, mountCap(FSXFS, rwo), nil)
			if got := len(m.mountsAt(staging)); got != 1 {
				t.Errorf("%d mounts on the staging path after the retry, want 1", got)
			}
		})
	}
}
