package loopdev

import "testing"

// For the tests in package loopdev_test.

// FakeDev describes one loop device of a FakeSysfs.
type FakeDev struct{ Backing, Dev string }

// FakeSysfs builds a scratch sysfs holding devs.
func FakeSysfs(t *testing.T, devs map[string]FakeDev) Sysfs {
	m := make(map[string]fakeDev, len(devs))
	for name, d := range devs {
		m[name] = fakeDev{backing: d.Backing, dev: d.Dev}
	}
	return fakeSysfs(t, m)
}

// LoopNumber is loopNumber.
func LoopNumber(name string) (int, bool) { return loopNumber(name) }
