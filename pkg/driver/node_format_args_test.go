package driver

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestNodeMkfsArguments: the volume context's format options and the node's --legacy-xfs reach mkfs as the
// EBS driver passes them (ext4 bigalloc: -O bigalloc -C size; legacy xfs: -m reflink=0,inobtcount=0,bigtime=0
// -i nrext64=0, only what the installed mkfs.xfs knows), before the flags mount-utils adds; ext3 is made by
// mkfs.ext3 and mounted as ext3. mkfs.xfs is probed once, at start, and only for --legacy-xfs.
func TestNodeMkfsArguments(t *testing.T) {
	t.Parallel()
	const vol = "vol-00000000000000f11"
	legacyAll := []string{"-m", "reflink=0,inobtcount=0,bigtime=0", "-i", "nrext64=0"}
	tests := []struct {
		name       string
		fsType     string
		vctx       map[string]string
		legacyXFS  bool
		xfsUnknown []string // options the machine's mkfs.xfs does not know
		want       []string // mkfs arguments before the device
		code       codes.Code
	}{
		{name: "ext4", fsType: FSExt4, want: []string{"-F", "-m0"}},
		{name: "ext4 bigalloc", fsType: FSExt4, vctx: map[string]string{ContextExt4BigAlloc: "true"},
			want: []string{"-O", "bigalloc", "-F", "-m0"}},
		{name: "ext4 bigalloc, cluster and block size", fsType: FSExt4,
			vctx: map[string]string{ContextExt4ClusterSize: "16384", ContextExt4BigAlloc: "true", ContextBlockSize: "4096"},
			want: []string{"-b", "4096", "-O", "bigalloc", "-C", "16384", "-F", "-m0"}},
		{name: "ext4 bigalloc false", fsType: FSExt4, vctx: map[string]string{ContextExt4BigAlloc: "false"}, want: []string{"-F", "-m0"}},
		{name: "ext3", fsType: FSExt3, vctx: map[string]string{ContextBlockSize: "1024"}, want: []string{"-b", "1024", "-F", "-m0"}},
		{name: "ext3 from the volume context", vctx: map[string]string{ParamFSType: FSExt3}, want: []string{"-F", "-m0"}},
		{name: "ext4 with legacy xfs", fsType: FSExt4, legacyXFS: true, want: []string{"-F", "-m0"}},
		{name: "xfs", fsType: FSXFS, want: []string{"-f"}},
		{name: "legacy xfs", fsType: FSXFS, legacyXFS: true, want: append(slices.Clone(legacyAll), "-f")},
		{name: "legacy xfs with block and inode size", fsType: FSXFS, legacyXFS: true,
			vctx: map[string]string{ContextInodeSize: "512", ContextBlockSize: "4096"},
			want: slices.Concat([]string{"-b", "size=4096", "-i", "size=512"}, legacyAll, []string{"-f"})},
		{name: "legacy xfs, mkfs.xfs before nrext64", fsType: FSXFS, legacyXFS: true, xfsUnknown: []string{"nrext64"},
			want: []string{"-m", "reflink=0,inobtcount=0,bigtime=0", "-f"}},
		{name: "legacy xfs, mkfs.xfs before bigtime", fsType: FSXFS, legacyXFS: true, xfsUnknown: []string{"nrext64", "bigtime", "inobtcount"},
			want: []string{"-m", "reflink=0", "-f"}},
		{name: "legacy xfs, mkfs.xfs before reflink", fsType: FSXFS, legacyXFS: true,
			xfsUnknown: []string{"nrext64", "bigtime", "inobtcount", "reflink"}, want: []string{"-f"}},
		// A statically provisioned volume's context is checked at stage as CreateVolume checks a class.
		{name: "bigalloc on xfs", fsType: FSXFS, vctx: map[string]string{ContextExt4BigAlloc: "true"}, code: codes.InvalidArgument},
		{name: "bigalloc on ext3", fsType: FSExt3, vctx: map[string]string{ContextExt4BigAlloc: "true"}, code: codes.InvalidArgument},
		{name: "cluster size without bigalloc", fsType: FSExt4, vctx: map[string]string{ContextExt4ClusterSize: "16384"},
			code: codes.InvalidArgument},
		{name: "bigalloc not a bool", fsType: FSExt4, vctx: map[string]string{ContextExt4BigAlloc: "-E nodiscard"}, code: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newFakeMachine(t)
			m.xfsUnknown = tc.xfsUnknown
			d := m.loopVolume(vol, 1, gib)
			e := newFakeEnvWith(t, m, NodeOptions{LegacyXFS: tc.legacyXFS})
			wantProbes := 0
			if tc.legacyXFS {
				wantProbes = len(legacyXFSFeatures)
			}
			staging := e.path("staging")
			err := e.stage(vol, staging, mountCap(tc.fsType, rwo), tc.vctx)
			wantCode(t, err, tc.code, "stage")
			args := m.ranMkfsArgs()
			if tc.code != codes.OK {
				if len(args) != 0 {
					t.Errorf("mkfs ran with %q", args)
				}
				return
			}
			if len(args) != 1 || !slices.Equal(args[0], tc.want) {
				t.Errorf("mkfs arguments %q, want one run with %q", args, tc.want)
			}
			wantFS := tc.fsType
			if wantFS == "" {
				wantFS = tc.vctx[ParamFSType]
			}
			if mounts := m.mountsAt(staging); len(mounts) != 1 || mounts[0].FSType != wantFS || mounts[0].Source != d.node {
				t.Errorf("staging path mounts %+v, want %s from %s", mounts, wantFS, d.node)
			}
			e.mustUnstage(vol, staging)
			e.mustStage(vol, staging, mountCap(tc.fsType, rwo), tc.vctx)
			if got := len(m.ranMkfsArgs()); got != 1 {
				t.Errorf("mkfs ran %d times after a second stage, want once", got)
			}
			m.mu.Lock()
			probes := m.xfsProbes
			m.mu.Unlock()
			if probes != wantProbes {
				t.Errorf("mkfs.xfs probed %d times, want %d (once per feature, at start)", probes, wantProbes)
			}
		})
	}
}
