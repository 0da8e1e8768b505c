package blockdev

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeSysBlock builds a /sys/block look-alike: name -> backing_file content ("" = unbound), plus autoclear.
func fakeSysBlock(t *testing.T, devs map[string]struct{ backing, autoclear string }) string {
	t.Helper()
	root := t.TempDir()
	for name, d := range devs {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if d.backing == "" {
			continue
		}
		loop := filepath.Join(dir, "loop")
		if err := os.MkdirAll(loop, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(loop, "backing_file"), []byte(d.backing+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if d.autoclear != "" {
			if err := os.WriteFile(filepath.Join(loop, "autoclear"), []byte(d.autoclear+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestListLoopDevices(t *testing.T) {
	root := fakeSysBlock(t, map[string]struct{ backing, autoclear string }{
		"loop0":   {}, // unbound
		"loop1":   {backing: "/data/volumes/vol-1.img", autoclear: "0"},
		"loop10":  {backing: "/data/volumes/vol-10.img"}, // sorted numerically, after loop2
		"loop2":   {backing: "/data/volumes/vol-2.img (deleted)", autoclear: "0"},
		"loop3":   {backing: "/data/volumes/vol-1.img", autoclear: "1"},
		"loop0p1": {backing: "/not/a/device"},
		"vda":     {backing: "/not/a/loop"},
		"loopx":   {backing: "/not/a/loop"},
	})
	got, err := listLoopDevices(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []loopDevice{
		{name: "loop1", number: 1, backing: "/data/volumes/vol-1.img"},
		{name: "loop2", number: 2, backing: "/data/volumes/vol-2.img", deleted: true},
		{name: "loop3", number: 3, backing: "/data/volumes/vol-1.img", autoclear: true},
		{name: "loop10", number: 10, backing: "/data/volumes/vol-10.img"},
	}
	if len(got) != len(want) {
		t.Fatalf("listLoopDevices = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	tests := []struct {
		backing string
		want    string // device name, "" for none
	}{
		{"/data/volumes/vol-1.img", "loop1"}, // loop3 is pending release and does not count
		{"/data/volumes/vol-2.img", ""},      // only a device of the deleted file remains
		{"/data/volumes/vol-10.img", "loop10"},
		{"/data/volumes/vol-3.img", ""},
		{"/data/volumes/../volumes/vol-10.img", "loop10"},
	}
	for _, tc := range tests {
		d, ok, err := findLoopDevice(root, tc.backing)
		if err != nil {
			t.Fatalf("findLoopDevice(%s): %v", tc.backing, err)
		}
		if ok != (tc.want != "") || d.name != tc.want {
			t.Errorf("findLoopDevice(%s) = %q, %v; want %q", tc.backing, d.name, ok, tc.want)
		}
		if ok && d.devPath() != "/dev/"+tc.want {
			t.Errorf("devPath = %s", d.devPath())
		}
	}
}

func TestLoopNumber(t *testing.T) {
	tests := []struct {
		name string
		n    int
		ok   bool
	}{
		{"loop0", 0, true},
		{"loop123", 123, true},
		{"loop", 0, false},
		{"loop1p2", 0, false},
		{"loop-1", 0, false},
		{"nvme0n1", 0, false},
	}
	for _, tc := range tests {
		n, ok := loopNumber(tc.name)
		if n != tc.n || ok != tc.ok {
			t.Errorf("loopNumber(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
}
