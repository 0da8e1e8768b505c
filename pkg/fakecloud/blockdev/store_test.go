package blockdev

import (
	"os"
	"path/filepath"
	"testing"
)

func TestVolumeIDOf(t *testing.T) {
	parent := t.TempDir()
	s, err := newFileStore(filepath.Join(parent, "data"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		id   string // "" when not one of the store's volumes
	}{
		{s.volumeFile("vol-1"), "vol-1"},
		{filepath.Join(parent, "data", "volumes", "vol-2.img"), "vol-2"},
		{filepath.Join(parent, "data-other", "volumes", "vol-1.img"), ""}, // sibling with a common prefix
		{filepath.Join(parent, "data", "snapshots", "snap-1.img"), ""},
		{filepath.Join(parent, "data", "volumes", "sub", "vol-1.img"), ""},
		{filepath.Join(parent, "data", "volumes", ".vol-1.img.123.tmp"), ""},
		{filepath.Join(parent, "data", "volumes", "vol-1.raw"), ""},
		{filepath.Join(parent, "data", "volumes", ".img"), ""},
		{"/dev/zero", ""},
	}
	for _, tc := range tests {
		id, ok := s.volumeIDOf(tc.path)
		if id != tc.id || ok != (tc.id != "") {
			t.Errorf("volumeIDOf(%s) = %q, %v; want %q", tc.path, id, ok, tc.id)
		}
	}
}

// TestStoreResolvesSymlinks matters for loop devices: sysfs names backing files by their real path.
func TestStoreResolvesSymlinks(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	s, err := newFileStore(link)
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(resolved, "volumes", "v.img"); s.volumeFile("v") != want {
		t.Fatalf("volumeFile = %s, want %s", s.volumeFile("v"), want)
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{"vol-0123456789abcdef0", true},
		{"snap-1", true},
		{"", false},
		{"a/b", false},
		{"..", false},
		{".hidden", false},
		{"nul\x00", false},
	}
	for _, tc := range tests {
		if err := validateID("volume", tc.id); (err == nil) != tc.ok {
			t.Errorf("validateID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
}
