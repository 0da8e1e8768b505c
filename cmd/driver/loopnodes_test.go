package main

import (
	"testing"

	"github.com/moby/sys/mountinfo"
)

// TestKernelManaged: loop device nodes are made in a container's /dev (kind's tmpfs), never in the kernel's
// devtmpfs, where they would outlive the plugin.
func TestKernelManaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts []*mountinfo.Info
		want   bool
	}{
		{"a machine's /dev", []*mountinfo.Info{{Mountpoint: "/dev", FSType: "devtmpfs"}}, true},
		{"a kind node's /dev", []*mountinfo.Info{{Mountpoint: "/dev", FSType: "tmpfs"}}, false},
		{"a tmpfs over the devtmpfs", []*mountinfo.Info{{Mountpoint: "/dev", FSType: "devtmpfs"}, {Mountpoint: "/dev", FSType: "tmpfs"}}, false},
		{"no mount at /dev", nil, false},
	} {
		if got := kernelManaged(tc.mounts); got != tc.want {
			t.Errorf("%s: kernelManaged = %v, want %v", tc.name, got, tc.want)
		}
	}
}
