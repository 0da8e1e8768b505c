package blockdev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCopiesStaySparse copies a 1 GiB file holding a few scattered bytes and checks the copy allocates
// next to nothing while keeping size and contents.
func TestCopiesStaySparse(t *testing.T) {
	const size = 1 << 30
	marks := map[int64][]byte{
		0:             []byte("head"),
		300 << 20:     []byte("middle"),
		size - 4:      []byte("tail"),
		(700 << 20):   []byte("\x00\x00x\x00"),
		(512<<20 + 7): []byte("unaligned"),
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for off, b := range marks {
		writeAt(t, src, off, b)
	}

	copyWith := func(fn func(ctx context.Context, dst, src *os.File, size int64) error) func(t *testing.T, dst string) {
		return func(t *testing.T, dst string) {
			s, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d, err := os.Create(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := fn(context.Background(), d, s, size); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		copy func(t *testing.T, dst string)
	}{
		{"extent walk", copyWith(sparseCopy)},
		{"buffered zero skip", copyWith(func(ctx context.Context, dst, src *os.File, size int64) error {
			if err := dst.Truncate(size); err != nil {
				return err
			}
			return bufferedCopy(ctx, dst, src, 0, size)
		})},
		{"reflink or copy, atomic", func(t *testing.T, dst string) {
			if err := copyFileAtomic(context.Background(), dst, src, 0, true); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst.img")
			tc.copy(t, dst)
			if got := fileSize(t, dst); got != size {
				t.Fatalf("copy size = %d, want %d", got, size)
			}
			for off, b := range marks {
				expectAt(t, dst, off, b)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(dst, &st); err != nil {
				t.Fatal(err)
			}
			// Each mark costs at most a block or two; allow generous filesystem overhead but far less than
			// the gigabyte a dense copy would take.
			if used := st.Blocks * 512; used > 4<<20 {
				t.Fatalf("copy allocates %d bytes, want a sparse copy under 4 MiB", used)
			}
		})
	}
}

func TestCopyFileAtomicErrors(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	if err := copyFileAtomic(context.Background(), dst, filepath.Join(dir, "missing"), 0, true); !isNotFound(err) {
		t.Fatalf("missing source: err = %v, want ErrNotFound", err)
	}
	if err := copyFileAtomic(context.Background(), dst, src, 100, true); err == nil {
		t.Fatal("growing to less than the source succeeded")
	}
	// A cancelled copy must leave neither dst nor a temporary file. (A reflink may finish before the context
	// is looked at; then dst simply exists.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := copyFileAtomic(ctx, dst, src, 0, true)
	if _, statErr := os.Stat(dst); err != nil && statErr == nil {
		t.Fatalf("failed copy (%v) left %s behind", err, dst)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "src" && e.Name() != "dst" {
			t.Errorf("left behind %s", e.Name())
		}
	}
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
