package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fakeDev describes one entry of a fake /sys/block: backing is the backing_file content ("" = unbound), autoclear
// the autoclear attribute ("" = absent), dev the "major:minor" attribute ("" = absent).
type fakeDev struct{ backing, autoclear, dev string }

// fakeSysfs builds a /sys/block look-alike in a temporary directory.
func fakeSysfs(t *testing.T, devs map[string]fakeDev) Sysfs {
	t.Helper()
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, d := range devs {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if d.dev != "" {
			write(filepath.Join(dir, "dev"), d.dev)
		}
		if d.backing == "" {
			continue
		}
		write(filepath.Join(dir, "loop", "backing_file"), d.backing)
		if d.autoclear != "" {
			write(filepath.Join(dir, "loop", "autoclear"), d.autoclear)
		}
	}
	return Sysfs{Root: root}
}

func TestList(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop0":   {}, // unbound
		"loop1":   {backing: "/data/volumes/vol-1.img", autoclear: "0"},
		"loop10":  {backing: "/data/volumes/vol-10.img"}, // sorted numerically, after loop2
		"loop2":   {backing: "/data/volumes/vol-2.img (deleted)", autoclear: "0"},
		"loop3":   {backing: "/data/volumes/vol-1.img", autoclear: "1"},
		"loop0p1": {backing: "/not/a/device"},
		"vda":     {backing: "/not/a/loop"},
		"loopx":   {backing: "/not/a/loop"},
	})
	got, err := sys.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Name: "loop1", Number: 1, Backing: "/data/volumes/vol-1.img"},
		{Name: "loop2", Number: 2, Backing: "/data/volumes/vol-2.img", Deleted: true},
		{Name: "loop3", Number: 3, Backing: "/data/volumes/vol-1.img", Autoclear: true},
		{Name: "loop10", Number: 10, Backing: "/data/volumes/vol-10.img"},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	if _, err := (Sysfs{Root: filepath.Join(t.TempDir(), "missing")}).List(); err == nil {
		t.Error("List of a missing root succeeded")
	}
}

func TestRead(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop0":   {},
		"loop4":   {backing: "/v/a.img", autoclear: "1"},
		"loop0p1": {backing: "/v/p.img"},
	})
	tests := []struct {
		name  string
		want  Device
		bound bool
	}{
		{"loop4", Device{Name: "loop4", Number: 4, Backing: "/v/a.img", Autoclear: true}, true},
		{"loop0", Device{}, false},   // unbound
		{"loop7", Device{}, false},   // no such device (or it unbound meanwhile)
		{"loop0p1", Device{}, false}, // partition
		{"../loop4", Device{}, false},
	}
	for _, tc := range tests {
		d, bound, err := sys.Read(tc.name)
		if err != nil || bound != tc.bound || d != tc.want {
			t.Errorf("Read(%q) = %+v, %v, %v; want %+v, %v", tc.name, d, bound, err, tc.want, tc.bound)
		}
	}
}

func TestFindByBackingFile(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop1":  {backing: "/data/volumes/vol-1.img", autoclear: "0"},
		"loop10": {backing: "/data/volumes/vol-10.img"},
		"loop2":  {backing: "/data/volumes/vol-2.img (deleted)", autoclear: "0"},
		"loop3":  {backing: "/data/volumes/vol-1.img", autoclear: "1"},
		"loop5":  {backing: "/data/volumes/vol-5.img"},
		"loop4":  {backing: "/data/volumes/vol-5.img"}, // a second live binding of the same file
	})
	tests := []struct {
		backing string
		want    string // device name, "" for none
	}{
		{"/data/volumes/vol-1.img", "loop1"}, // loop3 is pending release and does not count
		{"/data/volumes/vol-2.img", ""},      // only a device of the deleted file remains
		{"/data/volumes/vol-10.img", "loop10"},
		{"/data/volumes/vol-3.img", ""},
		{"/data/volumes/../volumes/vol-10.img", "loop10"},
		{"/data/volumes/vol-5.img", "loop4"}, // the lowest number wins
	}
	for _, tc := range tests {
		d, ok, err := sys.FindByBackingFile(tc.backing)
		if err != nil {
			t.Fatalf("FindByBackingFile(%s): %v", tc.backing, err)
		}
		if ok != (tc.want != "") || d.Name != tc.want {
			t.Errorf("FindByBackingFile(%s) = %q, %v; want %q", tc.backing, d.Name, ok, tc.want)
		}
		if ok && d.Path() != "/dev/"+tc.want {
			t.Errorf("Path = %s", d.Path())
		}
	}
}

// TestFindByBackingFileSymlink: sysfs reports the resolved path, so a caller naming the file through a
// symlinked directory must still find the device.
func TestFindByBackingFileSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "vol-1.img"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Join(real, "vol-1.img"))
	if err != nil {
		t.Fatal(err)
	}
	sys := fakeSysfs(t, map[string]fakeDev{"loop6": {backing: resolved}})
	d, ok, err := sys.FindByBackingFile(filepath.Join(dir, "link", "vol-1.img"))
	if err != nil || !ok || d.Name != "loop6" {
		t.Fatalf("FindByBackingFile through a symlink = %+v, %v, %v; want loop6", d, ok, err)
	}
}

func TestFindByBackingBase(t *testing.T) {
	tests := []struct {
		name      string
		devs      map[string]fakeDev
		base      string
		want      string // device name, "" for none
		ambiguous bool
		invalid   bool
	}{
		{
			name: "match",
			devs: map[string]fakeDev{
				"loop0": {backing: "/var/lib/fakecloud/volumes/vol-0123.img"},
				"loop1": {backing: "/var/lib/fakecloud/volumes/vol-0456.img"},
			},
			base: "vol-0123.img",
			want: "loop0",
		},
		{
			name: "none",
			devs: map[string]fakeDev{
				"loop0": {backing: "/var/lib/fakecloud/volumes/vol-0456.img"},
				"loop1": {}, // unbound
			},
			base: "vol-0123.img",
		},
		{
			name: "no prefix or suffix match",
			devs: map[string]fakeDev{
				"loop0": {backing: "/d/volumes/vol-0123.img.bak"},
				"loop1": {backing: "/d/volumes/xvol-0123.img"},
				"loop2": {backing: "/d/vol-0123.img/inner"},
			},
			base: "vol-0123.img",
		},
		{
			name: "deleted ignored",
			devs: map[string]fakeDev{
				"loop0": {backing: "/d/volumes/vol-0123.img (deleted)"},
			},
			base: "vol-0123.img",
		},
		{
			name: "autoclear ignored",
			devs: map[string]fakeDev{
				"loop0": {backing: "/d/volumes/vol-0123.img", autoclear: "1"},
			},
			base: "vol-0123.img",
		},
		{
			name: "live one among released ones",
			devs: map[string]fakeDev{
				"loop0": {backing: "/d/volumes/vol-0123.img (deleted)"},
				"loop1": {backing: "/d/volumes/vol-0123.img", autoclear: "1"},
				"loop2": {backing: "/d/volumes/vol-0123.img", autoclear: "0"},
			},
			base: "vol-0123.img",
			want: "loop2",
		},
		{
			name: "ambiguous across directories",
			devs: map[string]fakeDev{
				"loop0": {backing: "/a/volumes/vol-0123.img"},
				"loop1": {backing: "/b/volumes/vol-0123.img"},
			},
			base:      "vol-0123.img",
			ambiguous: true,
		},
		{
			name: "ambiguous same file",
			devs: map[string]fakeDev{
				"loop3": {backing: "/a/volumes/vol-0123.img"},
				"loop9": {backing: "/a/volumes/vol-0123.img"},
			},
			base:      "vol-0123.img",
			ambiguous: true,
		},
		{name: "empty base", base: "", invalid: true},
		{name: "path instead of base", base: "volumes/vol-0123.img", invalid: true},
		{name: "dot dot", base: "..", invalid: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sys := fakeSysfs(t, tc.devs)
			d, ok, err := sys.FindByBackingBase(tc.base)
			switch {
			case tc.ambiguous:
				if !errors.Is(err, ErrAmbiguous) || ok {
					t.Fatalf("FindByBackingBase(%q) = %+v, %v, %v; want ErrAmbiguous", tc.base, d, ok, err)
				}
				return
			case tc.invalid:
				if err == nil || errors.Is(err, ErrAmbiguous) || ok {
					t.Fatalf("FindByBackingBase(%q) = %+v, %v, %v; want an invalid-name error", tc.base, d, ok, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("FindByBackingBase(%q): %v", tc.base, err)
			}
			if ok != (tc.want != "") || d.Name != tc.want {
				t.Fatalf("FindByBackingBase(%q) = %q, %v; want %q", tc.base, d.Name, ok, tc.want)
			}
		})
	}
}

// TestFindByBackingBaseReadsSizedDevices: with a partitions list, only the loop devices it names are read, so a
// binding the list leaves out (of size 0, or not sized yet) is not found; without the list every device is read.
func TestFindByBackingBaseReadsSizedDevices(t *testing.T) {
	sys := fakeSysfs(t, map[string]fakeDev{
		"loop0": {backing: "/d/volumes/vol-listed.img"},
		"loop1": {backing: "/d/volumes/vol-unlisted.img"},
		"loop2": {},
	})
	list := filepath.Join(t.TempDir(), "partitions")
	content := "major minor  #blocks  name\n\n 254        0  268435456 vda\n   7        0    1048576 loop0\n" +
		"   7        2    1048576 loop2\n 259        1    1048576 loop0p1\n"
	if err := os.WriteFile(list, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, partitions, base, want string
	}{
		{"listed", list, "vol-listed.img", "loop0"},
		{"not listed", list, "vol-unlisted.img", ""},
		{"no list: every device", "", "vol-unlisted.img", "loop1"},
		{"unreadable list: every device", filepath.Join(t.TempDir(), "missing"), "vol-unlisted.img", "loop1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := sys
			s.Partitions = tc.partitions
			d, ok, err := s.FindByBackingBase(tc.base)
			if err != nil || ok != (tc.want != "") || d.Name != tc.want {
				t.Fatalf("FindByBackingBase(%q) = %q, %v, %v; want %q", tc.base, d.Name, ok, err, tc.want)
			}
		})
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
		{"loop+1", 0, false},
		{"loop01", 0, false},
		{"nvme0n1", 0, false},
	}
	for _, tc := range tests {
		n, ok := loopNumber(tc.name)
		if n != tc.n || ok != tc.ok {
			t.Errorf("loopNumber(%q) = %d, %v; want %d, %v", tc.name, n, ok, tc.n, tc.ok)
		}
	}
}

func TestLiveAndPath(t *testing.T) {
	tests := []struct {
		d    Device
		live bool
	}{
		{Device{Name: "loop2"}, true},
		{Device{Name: "loop2", Deleted: true}, false},
		{Device{Name: "loop2", Autoclear: true}, false},
	}
	for _, tc := range tests {
		if got := tc.d.Live(); got != tc.live {
			t.Errorf("%+v.Live() = %v, want %v", tc.d, got, tc.live)
		}
		if got := tc.d.Path(); got != "/dev/loop2" {
			t.Errorf("Path = %q", got)
		}
	}
}

func TestBackedUnder(t *testing.T) {
	s := fakeSysfs(t, map[string]fakeDev{
		"loop0": {backing: "/run/a/volumes/vol-1.img"},
		"loop1": {backing: "/run/a/volumes/vol-2.img (deleted)"},
		"loop2": {backing: "/run/a/volumes/vol-3.img", autoclear: "1"},
		"loop3": {backing: "/run/ab/vol-4.img"},
		"loop4": {backing: "/srv/other.img"},
		"loop5": {},
	})
	devs, err := s.BackedUnder("/run/a/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
	}
	// Deleted and released-on-close devices still hold the run's files; a sibling directory is not below it.
	if got := fmt.Sprint(names); got != "[loop0 loop1 loop2]" {
		t.Errorf("BackedUnder = %s, want [loop0 loop1 loop2]", got)
	}
}

func TestNumberOf(t *testing.T) {
	cases := []struct {
		path string
		want int
		ok   bool
	}{
		{"/dev/loop0", 0, true},
		{"/dev/loop17", 17, true},
		{"/dev/loop0p1", 0, false},
		{"/dev/loop01", 0, false},
		{"/dev/nvme0n1", 0, false},
		{"loop3", 0, false},
		{"", 0, false},
		{"/var/lib/fakecloud/volumes/vol-1.img", 0, false},
	}
	for _, tc := range cases {
		if n, ok := NumberOf(tc.path); n != tc.want || ok != tc.ok {
			t.Errorf("NumberOf(%q) = %d, %v; want %d, %v", tc.path, n, ok, tc.want, tc.ok)
		}
	}
}
