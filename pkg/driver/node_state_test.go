package driver

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestNodeStateRecords: a record reads back as written, from disk and in memory; one a crash cut short (no
// "end=" line) or garbled reads as none; a device record of another boot is none; names other than volume IDs
// are refused.
func TestNodeStateRecords(t *testing.T) {
	t.Parallel()
	const vol = "vol-0123456789abcdef0"
	for _, dir := range []string{t.TempDir(), ""} {
		s, err := newNodeState(dir)
		if err != nil {
			t.Fatal(err)
		}
		must(t, s.startFormat(vol, "/dev/loop3"))
		if dev, err := s.unfinishedFormat(vol); err != nil || dev != "/dev/loop3" {
			t.Errorf("%q: unfinished format = %q, %v", dir, dev, err)
		}
		must(t, s.finishFormat(vol))
		must(t, s.finishFormat(vol))
		if dev, err := s.unfinishedFormat(vol); err != nil || dev != "" {
			t.Errorf("%q: unfinished format after finishing = %q, %v", dir, dev, err)
		}
		must(t, s.recordStagedDevice(vol, "boot-1", stagedDevice{path: "/dev/xvdba", rdev: 202<<8 | 26}))
		if d, ok, err := s.stagedDevice(vol, "boot-1"); err != nil || !ok || d.path != "/dev/xvdba" || d.rdev != 202<<8|26 {
			t.Errorf("%q: staged device = %+v, %v, %v", dir, d, ok, err)
		}
		if _, ok, err := s.stagedDevice(vol, "boot-2"); err != nil || ok {
			t.Errorf("%q: staged device of another boot = %v, %v; want none", dir, ok, err)
		}
		if err := s.startFormat("../../etc/passwd", "/dev/loop3"); !errors.Is(err, errInvalidParameter) {
			t.Errorf("%q: a record named by a path: %v", dir, err)
		}
	}
	dir := t.TempDir()
	s, err := newNodeState(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, recordFormatting, vol)
	for name, content := range map[string]string{"cut short": "device=/dev/loop3\n", "garbled": "\x00\x00\x00\x00", "empty": ""} {
		must(t, os.WriteFile(file, []byte(content), 0o600))
		if dev, err := s.unfinishedFormat(vol); err != nil || dev != "" {
			t.Errorf("%s record: unfinished format = %q, %v; want none", name, dev, err)
		}
	}
}
