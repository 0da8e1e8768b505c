package testutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/internal/hostclean"
)

// LoopDevice binds a loop device with the given logical sector size to a sparse file of size bytes in dir,
// after prepare (when set) has written to the file. At cleanup, also when the test fails, the mounts under dir
// are undone and the device is released; nothing outside dir is touched.
func LoopDevice(t testing.TB, dir string, size int64, sector int, prepare func(file string)) string {
	t.Helper()
	t.Cleanup(func() {
		UnmountUnder(t, dir)
		if err := hostclean.ReleaseLoopsUnder(dir); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	file := filepath.Join(dir, "disk.img")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(file)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", strconv.Itoa(sector), file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", file, err, out)
	}
	return strings.TrimSpace(string(out))
}
