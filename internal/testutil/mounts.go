package testutil

import (
	"testing"

	"github.com/diskforge/diskforge/internal/hostclean"
)

// UnmountUnder unmounts every mount point at or below dir, deepest first, so a failed test leaves no mount of
// its own behind. It touches nothing outside dir.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	if err := hostclean.UnmountUnder(dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}
