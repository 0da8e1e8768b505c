package cluster

import (
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/loopdev"
)

// releaseHost unmounts every mount below dir (deepest first) and releases every loop device whose backing
// file lies below dir: what kubelets, node plugins and fakecloud of this run left, and nothing else.
func releaseHost(dir string, logf func(string, ...any)) {
	if dir == "" {
		return
	}
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err == nil {
		var points []string
		for _, line := range strings.Split(string(raw), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == dir || strings.HasPrefix(unescape(f[4]), dir+"/")) {
				points = append(points, unescape(f[4]))
			}
		}
		sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && logf != nil {
				logf("cleanup: unmount %s: %v", p, err)
			}
		}
	}
	devs, err := loopdev.Sysfs{}.List()
	if err != nil {
		return
	}
	for _, d := range devs {
		if !strings.HasPrefix(d.Backing, dir+"/") {
			continue
		}
		f, err := os.Open(d.Path())
		if err != nil {
			continue
		}
		if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && logf != nil {
			logf("cleanup: release %s: %v", d.Path(), err)
		}
		_ = f.Close()
	}
}

func unescape(p string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(p)
}
