package driver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// record is a format record of this boot for a device.
func record(device string) formatRecord {
	return formatRecord{device: device, boot: "boot-1", fingerprint: "0123456789abcdef0123456789abcdef"}
}

// TestNodeStateRecords: records read back as written, in memory and from disk after a restart; the format
// records of several volumes take slots of their own and free them; a device record of another boot, or one
// cut short, is none; names other than volume IDs are refused.
func TestNodeStateRecords(t *testing.T) {
	t.Parallel()
	const vol, vol2 = "vol-0123456789abcdef0", "vol-0123456789abcdef1"
	dir := t.TempDir()
	for _, dir := range []string{dir, ""} {
		s, err := newNodeState(dir)
		if err != nil {
			t.Fatal(err)
		}
		must(t, s.startFormat(vol, record("/dev/loop3")))
		must(t, s.startFormat(vol2, record("/dev/loop4")))
		must(t, s.startFormat(vol, record("/dev/loop5")))
		must(t, s.finishFormat(vol2))
		if dir != "" {
			if s, err = newNodeState(dir); err != nil { // the plugin restarts
				t.Fatal(err)
			}
		}
		for v, want := range map[string]formatRecord{vol: record("/dev/loop5"), vol2: {}} {
			if rec, ok, err := s.unfinishedFormat(v); err != nil || rec != want || ok != (want != formatRecord{}) {
				t.Errorf("%q: unfinished format of %s = %+v, %v, %v; want %+v", dir, v, rec, ok, err, want)
			}
		}
		must(t, s.finishFormat(vol))
		must(t, s.finishFormat(vol))
		if rec, ok, err := s.unfinishedFormat(vol); err != nil || ok {
			t.Errorf("%q: unfinished format after finishing = %+v, %v", dir, rec, err)
		}
		must(t, s.recordStagedDevice(vol, "boot-1", stagedDevice{path: "/dev/xvdba", rdev: 202<<8 | 26}))
		if d, ok, err := s.stagedDevice(vol, "boot-1"); err != nil || !ok || d.path != "/dev/xvdba" || d.rdev != 202<<8|26 {
			t.Errorf("%q: staged device = %+v, %v, %v", dir, d, ok, err)
		}
		if _, ok, err := s.stagedDevice(vol, "boot-2"); err != nil || ok {
			t.Errorf("%q: staged device of another boot = %v, %v; want none", dir, ok, err)
		}
		must(t, s.forgetStagedDevice(vol))
		if _, ok, err := s.stagedDevice(vol, "boot-1"); err != nil || ok {
			t.Errorf("%q: staged device after forgetting = %v, %v; want none", dir, ok, err)
		}
		if err := s.startFormat("../../etc/passwd", record("/dev/loop3")); !errors.Is(err, errInvalidParameter) {
			t.Errorf("%q: a record named by a path: %v", dir, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, formatFile)); err != nil || st.Size() != formatSlots*slotSize {
		t.Errorf("format records file: %v, %v; want %d bytes", st, err, formatSlots*slotSize)
	}
	s, err := newNodeState(dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, deviceDir, vol)
	for name, content := range map[string]string{"cut short": "boot=boot-1\npath=/dev/xvdba\nrdev=202:26\n", "garbled": "\x00\x00\x00", "empty": ""} {
		must(t, os.WriteFile(file, []byte(content), 0o600))
		if _, ok, err := s.stagedDevice(vol, "boot-1"); err != nil || ok {
			t.Errorf("%s device record: %v, %v; want none", name, ok, err)
		}
	}
}

// TestFormatSlots: a slot reads back as written; one of the previous format ("<volume> <device>") reads as a
// record without boot and fingerprint, which matches no device; malformed slots and fields that would not
// read back are refused.
func TestFormatSlots(t *testing.T) {
	t.Parallel()
	const vol = "vol-0123456789abcdef0"
	slot, err := formatSlotText(vol, record("/dev/loop3"))
	must(t, err)
	if v, rec, ok := parseFormatSlot(slot); !ok || v != vol || rec != record("/dev/loop3") || !rec.matches(record("/dev/loop3")) {
		t.Errorf("slot read back as %q, %+v, %v", v, rec, ok)
	}
	old := make([]byte, slotSize)
	copy(old, vol+" /dev/loop3\n")
	v, rec, ok := parseFormatSlot(old)
	if !ok || v != vol || rec != (formatRecord{device: "/dev/loop3"}) {
		t.Errorf("previous format read as %q, %+v, %v", v, rec, ok)
	}
	if rec.matches(rec) || rec.matches(record("/dev/loop3")) {
		t.Error("a record of the previous format matches a device")
	}
	for _, garbled := range []string{"2 " + vol + " /dev/loop3 boot-1\n", "../etc /dev/loop3\n", "2 " + vol + " /dev/loop3 b f", "\x01\x02"} {
		bad := make([]byte, slotSize)
		copy(bad, garbled)
		if _, _, ok := parseFormatSlot(bad); ok {
			t.Errorf("malformed slot %q read as a record", garbled)
		}
	}
	for _, rec := range []formatRecord{{device: "/dev/a b", boot: "b", fingerprint: "f"}, {device: "/dev/a", fingerprint: "f"},
		{device: "/dev/" + strings.Repeat("x", slotSize), boot: "b", fingerprint: "f"}} {
		if _, err := formatSlotText(vol, rec); err == nil {
			t.Errorf("record %+v written", rec)
		}
	}
}
