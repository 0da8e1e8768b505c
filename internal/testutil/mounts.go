package testutil

import (
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// UnmountUnder unmounts every mount point at or below dir, deepest first, so a failed test leaves no mount of
// its own behind. It touches nothing outside dir.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Logf("cleanup: read mountinfo: %v", err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		// Mount points are octal-escaped in mountinfo.
		p := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", p, err)
		}
	}
}
