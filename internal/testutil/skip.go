// Package testutil holds helpers shared by tests of several packages.
package testutil

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether tests run under CI, which has root, loop devices and every tool installed.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipUnless skips the test with why when missing is not nil, except in CI, where a missing prerequisite is a
// failure of the harness: CI must run every test.
func SkipUnless(t testing.TB, missing error, why string) {
	t.Helper()
	if missing == nil {
		return
	}
	if InCI() {
		t.Fatalf("%s: %v (CI must provide it)", why, missing)
	}
	t.Skipf("%s: %v", why, missing)
}

// RequireTools skips (or fails in CI) unless every named program is on PATH.
func RequireTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		SkipUnless(t, err, n+" is needed")
	}
}

// RequireRoot skips (or fails in CI) unless the test runs as root; why names what needs it.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	var missing error
	if os.Geteuid() != 0 {
		missing = errors.New("not root")
	}
	SkipUnless(t, missing, why)
}
