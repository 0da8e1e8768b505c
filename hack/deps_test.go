// Package hack holds the project's scripts; this test checks what hack/deps.sh tells a user whose machine
// cannot run the demo or the tests, before it installs anything.
package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/internal/testutil"
)

// TestDepsSaysWhatIsMissing: without root, Go or loop devices, deps.sh stops at once and says what is missing
// and how to get it, instead of failing later in apt-get, go or losetup.
func TestDepsSaysWhatIsMissing(t *testing.T) {
	testutil.RequireRoot(t, "the cases drop privileges, hide Go and hide /dev")
	testutil.RequireTools(t, "setpriv", "unshare")
	// A copy in a directory anyone may read, as the unprivileged case needs (the checkout may be under /root).
	root, err := os.MkdirTemp("", "diskforge-deps-")
	if err == nil {
		err = os.Chmod(root, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	script := filepath.Join(root, "deps.sh")
	for _, f := range []struct{ from, to string }{{"deps.sh", script}, {"../go.mod", filepath.Join(root, "go.mod")}} {
		b, err := os.ReadFile(f.from)
		if err == nil {
			err = os.WriteFile(f.to, b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		command []string
		want    []string
	}{
		{"not root", []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", script, "demo"},
			[]string{"make demo needs root", `sudo env "PATH=$PATH" make demo`}},
		{"no Go on PATH", []string{"env", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "bash", script, "test"},
			[]string{"Go is not on PATH", "Install Go 1.", "/usr/local/go/bin"}},
		{"no loop devices", []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs none /dev && exec bash "$0" demo`, script},
			[]string{"No /dev/loop-control", "modprobe loop"}},
		{"unknown mode", []string{"bash", script, "all"}, []string{"usage: hack/deps.sh demo|test"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.command[0], tc.command[1:]...)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("deps.sh succeeded:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
