package driver

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// kubeletContext is the option kubelet adds with the CSIDriver's seLinuxMount (util.AddSELinuxMountOption:
// context=%q of the pod's label): quoted, with a comma inside the quotes.
const kubeletContext = `context="system_u:object_r:container_file_t:s0:c0,c1"`

// selinuxVolume is the loop volume of selinuxEnv.
const selinuxVolume = "vol-00000000000000051"

// selinuxEnv is a node on a fake machine with one attached volume, selinuxVolume; its staging directory
// exists, its target does not.
func selinuxEnv(t *testing.T) (m *fakeMachine, e *nodeEnv, staging, target string) {
	t.Helper()
	m = newFakeMachine(t)
	e = newFakeEnv(t, m)
	m.loopVolume(selinuxVolume, 1, gib)
	staging, target = e.path("staging"), e.path("target")
	must(t, os.Mkdir(staging, 0o750))
	return m, e, staging, target
}

// TestSELinuxContextMount: the SELinux context options of the mount flags reach the stage's mount as kubelet
// wrote them, one option each, quotes and inner commas kept; publish's bind leaves them out and shows the
// staged filesystem's labels, as the kernel's bind does.
func TestSELinuxContextMount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fsType string
		flags  []string
		// stageOpts must be among the stage mount's options; bindOpts are the bind's options past "bind".
		stageOpts, bindOpts []string
	}{
		{"kubelet's context", "ext4", []string{kubeletContext}, []string{kubeletContext}, nil},
		{"with the PV's mount options", "xfs", []string{"noatime", kubeletContext},
			[]string{"noatime", kubeletContext, "nouuid"}, []string{"noatime"}},
		{"in one flag with other options", "ext4", []string{"nodev," + kubeletContext + ",noexec"},
			[]string{"nodev," + kubeletContext + ",noexec"}, []string{"nodev,noexec"}},
		{"unquoted, no categories", "ext4", []string{"context=system_u:object_r:svirt_lxc_net_t:s0"},
			[]string{"context=system_u:object_r:svirt_lxc_net_t:s0"}, nil},
		{"a range", "ext4", []string{`context="system_u:object_r:container_file_t:s0-s0:c0.c1023"`},
			[]string{`context="system_u:object_r:container_file_t:s0-s0:c0.c1023"`}, nil},
		{"fscontext and rootcontext", "ext4",
			[]string{`fscontext="system_u:object_r:container_file_t:s0:c3,c4"`, "rootcontext=system_u:object_r:container_file_t:s0"},
			[]string{`fscontext="system_u:object_r:container_file_t:s0:c3,c4"`, "rootcontext=system_u:object_r:container_file_t:s0"}, nil},
		{"defcontext", "ext4", []string{"defcontext=system_u:object_r:container_file_t:s0"},
			[]string{"defcontext=system_u:object_r:container_file_t:s0"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, e, staging, target := selinuxEnv(t)
			vc := mountCap(tc.fsType, rwo, tc.flags...)
			e.mustStage(selinuxVolume, staging, vc, nil)
			e.mustPublish(selinuxVolume, staging, target, vc, false)

			calls := m.ranMounts()
			if len(calls) != 2 {
				t.Fatalf("mount calls %+v, want a stage and a bind", calls)
			}
			for _, o := range tc.stageOpts {
				if !slices.Contains(calls[0].opts, o) {
					t.Errorf("stage mount options %q lack %q", calls[0].opts, o)
				}
			}
			if want := append([]string{"bind"}, tc.bindOpts...); !slices.Equal(calls[1].opts, want) {
				t.Errorf("bind options %q, want %q", calls[1].opts, want)
			}
			// Each option as the mount shows it in its superblock options: what the external suite's seLinuxMount
			// specs look for in the pod's /proc/mounts.
			want := seLinuxContexts(tc.flags...)
			for _, p := range []string{staging, target} {
				mi := m.mountsAt(p)
				if len(mi) != 1 {
					t.Fatalf("%s holds %d mounts", p, len(mi))
				}
				if got := seLinuxContexts(mi[0].VFSOptions); len(got) == 0 || !maps.Equal(got, want) {
					t.Errorf("%s shows SELinux labels %v (%q), want %v", p, got, mi[0].VFSOptions, want)
				}
			}
			// kubelet repeats both calls after a restart: the same labels are the same stage and publish.
			e.mustStage(selinuxVolume, staging, vc, nil)
			e.mustPublish(selinuxVolume, staging, target, vc, false)
			if n := len(m.ranMounts()); n != 2 {
				t.Errorf("repeats mounted again: %d mount calls", n)
			}
		})
	}
}

// TestSELinuxContextRefused: a context option that is not one SELinux context is InvalidArgument at stage and
// at publish, before anything is mounted: nothing of it reaches mount(8)'s option list.
func TestSELinuxContextRefused(t *testing.T) {
	t.Parallel()
	const ok = "system_u:object_r:container_file_t:s0"
	hostile := [][]string{
		{`context="` + ok + `:c0,c1",bind`},                          // a bind of something else
		{`context="` + ok + `",x-mount.mkdir`},                       // userspace options are the driver's
		{`context="` + ok + `:c0,c1`},                                // unbalanced quote: the rest would be the value
		{`context=` + ok + `:c0,c1"`},                                // unbalanced the other way
		{`context="` + ok + `"x`},                                    // text after the quotes
		{`context="` + ok + `" -o remount`},                          // a second argument
		{"context=" + ok + "\n"},                                     // a newline
		{"context=" + ok + "\nnoexec"},                               // a newline splitting options
		{"context=" + ok + ";reboot"},                                // a shell would see two commands
		{"context='" + ok + "'"},                                     // single quotes are not libmount's
		{`context=""`},                                               // empty
		{"context"},                                                  // no value
		{"context=user_u:role_r"},                                    // no type
		{"context=" + ok + ":c0 c1"},                                 // a space
		{"context=" + ok + "\x00"},                                   // a NUL
		{`context="sys"tem_u:object_r:container_file_t:s0"`},         // quotes inside
		{"rootcontext=@target"},                                      // libmount's placeholder, not a context
		{`context="` + ok + `:c0,c1"`, `context="` + ok + `:c2,c3"`}, // two labels
		{`fscontext="` + ok + `:c0,c1",fscontext=` + ok},             // two labels in one flag
	}
	for _, flags := range hostile {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			t.Parallel()
			m, e, staging, target := selinuxEnv(t)
			wantCode(t, e.stage(selinuxVolume, staging, mountCap("ext4", rwo, flags...), nil), codes.InvalidArgument, "stage")
			e.mustStage(selinuxVolume, staging, mountCap("ext4", rwo), nil)
			wantCode(t, e.publish(selinuxVolume, staging, target, mountCap("ext4", rwo, flags...), false), codes.InvalidArgument, "publish")
			if calls := m.ranMounts(); len(calls) != 1 {
				t.Errorf("mount calls %+v, want only the plain stage", calls)
			}
		})
	}
}

// TestSELinuxContextStaged: a volume staged with some labels is not staged again, nor published, with others:
// the filesystem keeps the labels of its first mount, which pods of another label cannot use. A staging that
// shows no labels (SELinux off: mount(8) drops the options) is taken as it is.
func TestSELinuxContextStaged(t *testing.T) {
	t.Parallel()
	const other = `context="system_u:object_r:container_file_t:s0:c2,c3"`
	tests := []struct {
		name               string
		stagedWith, askFor []string
		want               codes.Code
	}{
		{"same labels", []string{kubeletContext}, []string{"noatime", kubeletContext}, codes.OK},
		{"other labels", []string{kubeletContext}, []string{other}, codes.AlreadyExists},
		{"no labels asked of a labelled staging", []string{kubeletContext}, nil, codes.AlreadyExists},
		{"labels asked of an unlabelled staging", nil, []string{kubeletContext}, codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, e, staging, target := selinuxEnv(t)
			e.mustStage(selinuxVolume, staging, mountCap("ext4", rwo, tc.stagedWith...), nil)
			ask := mountCap("ext4", rwo, tc.askFor...)
			wantCode(t, e.stage(selinuxVolume, staging, ask, nil), tc.want, "stage again")
			publishWant := tc.want
			if publishWant == codes.AlreadyExists {
				publishWant = codes.FailedPrecondition // the target is free; the staging is what does not fit
			}
			wantCode(t, e.publish(selinuxVolume, staging, target, ask, false), publishWant, "publish")
			if got := len(m.mountsAt(staging)); got != 1 {
				t.Errorf("staging holds %d mounts, want 1", got)
			}
			if tc.want != codes.OK {
				if len(m.mountsAt(target)) != 0 {
					t.Errorf("target mounted after a refused publish")
				}
			}
		})
	}
}
