package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
)

// backendCase builds a fresh backend on its own data directory, or skips.
type backendCase struct {
	name string
	make func(t *testing.T) Backend
}

var backendCases = []backendCase{
	{"file", func(t *testing.T) Backend {
		b, err := NewFileBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"file-nosync", func(t *testing.T) Backend {
		b, err := NewFileBackend(t.TempDir(), NoSync())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"loop", func(t *testing.T) Backend {
		b, _ := newLoopBackendT(t, t.TempDir())
		return b
	}},
	{"fuse", func(t *testing.T) Backend { return newFuseBackendT(t, t.TempDir(), nil) }},
}

// TestBackendContract checks the semantics every backend promises to the state layer.
func TestBackendContract(t *testing.T) {
	const mib = 1 << 20
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			ctx := context.Background()
			b := bc.make(t)

			if err := b.CreateVolume(ctx, "vol-a", 8*mib); err != nil {
				t.Fatalf("CreateVolume: %v", err)
			}
			if err := b.CreateVolume(ctx, "vol-a", 8*mib); err != nil {
				t.Fatalf("CreateVolume again with the same size: %v", err)
			}
			if err := b.CreateVolume(ctx, "vol-a", 16*mib); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("CreateVolume with another size: err = %v, want fs.ErrExist", err)
			}
			if err := b.CreateVolume(ctx, "vol-bad", 0); err == nil {
				t.Fatal("CreateVolume of 0 bytes succeeded")
			}
			if err := b.CreateVolume(ctx, "../escape", mib); err == nil {
				t.Fatal("CreateVolume with a path in the ID succeeded")
			}
			file := b.VolumeFile("vol-a")
			if got := fileSize(t, file); got != 8*mib {
				t.Fatalf("volume file size = %d, want %d", got, 8*mib)
			}

			if b.DevicePath("vol-a") != "" {
				t.Fatal("DevicePath before Attach is not empty")
			}
			dev, err := b.Attach(ctx, "vol-a")
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if again, err := b.Attach(ctx, "vol-a"); err != nil || again != dev {
				t.Fatalf("Attach again = %q, %v; want %q", again, err, dev)
			}
			if got := b.DevicePath("vol-a"); got != dev {
				t.Fatalf("DevicePath = %q, want %q", got, dev)
			}
			if _, err := b.Attach(ctx, "vol-missing"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Attach of a missing volume: err = %v, want ErrNotFound", err)
			}

			writeAt(t, dev, 3*mib+5, []byte("contract"))

			if err := b.ResizeVolume(ctx, "vol-a", 12*mib); err != nil {
				t.Fatalf("ResizeVolume: %v", err)
			}
			if err := b.ResizeVolume(ctx, "vol-a", 12*mib); err != nil {
				t.Fatalf("ResizeVolume to the same size: %v", err)
			}
			if err := b.ResizeVolume(ctx, "vol-a", 4*mib); err == nil {
				t.Fatal("ResizeVolume shrinking succeeded")
			}
			if err := b.ResizeVolume(ctx, "vol-missing", 4*mib); !errors.Is(err, ErrNotFound) {
				t.Fatalf("ResizeVolume of a missing volume: err = %v, want ErrNotFound", err)
			}
			if got := fileSize(t, file); got != 12*mib {
				t.Fatalf("volume file size after resize = %d, want %d", got, 12*mib)
			}

			if err := b.CreateSnapshot(ctx, "snap-a", "vol-a"); err != nil {
				t.Fatalf("CreateSnapshot: %v", err)
			}
			if err := b.CreateSnapshot(ctx, "snap-x", "vol-missing"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("CreateSnapshot of a missing volume: err = %v, want ErrNotFound", err)
			}
			// Writes after the snapshot must not show up in it.
			writeAt(t, dev, 3*mib+5, []byte("CHANGED!"))

			if err := b.RestoreVolume(ctx, "vol-b", "snap-a", 20*mib); err != nil {
				t.Fatalf("RestoreVolume: %v", err)
			}
			if err := b.RestoreVolume(ctx, "vol-b", "snap-a", 20*mib); err != nil {
				t.Fatalf("RestoreVolume replayed: %v", err)
			}
			if err := b.RestoreVolume(ctx, "vol-c", "snap-a", 4*mib); err == nil {
				t.Fatal("RestoreVolume smaller than the snapshot succeeded")
			}
			if err := b.RestoreVolume(ctx, "vol-c", "snap-missing", 20*mib); !errors.Is(err, ErrNotFound) {
				t.Fatalf("RestoreVolume from a missing snapshot: err = %v, want ErrNotFound", err)
			}
			if got := fileSize(t, b.VolumeFile("vol-b")); got != 20*mib {
				t.Fatalf("restored size = %d, want %d", got, 20*mib)
			}
			expectAt(t, b.VolumeFile("vol-b"), 3*mib+5, []byte("contract"))

			if err := b.Detach(ctx, "vol-a", false); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if err := b.Detach(ctx, "vol-a", false); err != nil {
				t.Fatalf("Detach when not attached: %v", err)
			}
			if got := b.DevicePath("vol-a"); got != "" {
				t.Fatalf("DevicePath after Detach = %q", got)
			}

			if _, err := b.Attach(ctx, "vol-b"); err != nil {
				t.Fatalf("Attach vol-b: %v", err)
			}
			if err := b.DeleteVolume(ctx, "vol-b"); err != nil { // attached: detaches first
				t.Fatalf("DeleteVolume of an attached volume: %v", err)
			}
			if b.DevicePath("vol-b") != "" {
				t.Fatal("deleted volume still has a device")
			}
			for _, id := range []string{"vol-a", "vol-b", "vol-never"} {
				if err := b.DeleteVolume(ctx, id); err != nil {
					t.Fatalf("DeleteVolume(%s): %v", id, err)
				}
			}
			if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("volume file still there: %v", err)
			}
			for range 2 {
				if err := b.DeleteSnapshot(ctx, "snap-a"); err != nil {
					t.Fatalf("DeleteSnapshot: %v", err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// TestBackendConcurrentAttach attaches several volumes at once; each must get its own device.
func TestBackendConcurrentAttach(t *testing.T) {
	const n = 6
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			ctx := context.Background()
			b := bc.make(t)
			for i := range n {
				if err := b.CreateVolume(ctx, fmt.Sprintf("vol-%d", i), 1<<20); err != nil {
					t.Fatal(err)
				}
			}
			devs := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { devs[i], errs[i] = b.Attach(ctx, fmt.Sprintf("vol-%d", i)) })
			}
			wg.Wait()
			seen := map[string]string{}
			for i := range n {
				id := fmt.Sprintf("vol-%d", i)
				if errs[i] != nil {
					t.Fatalf("Attach(%s): %v", id, errs[i])
				}
				if other, dup := seen[devs[i]]; dup {
					t.Fatalf("%s and %s share device %s", id, other, devs[i])
				}
				seen[devs[i]] = id
				if got := b.DevicePath(id); got != devs[i] {
					t.Errorf("DevicePath(%s) = %q, want %q", id, got, devs[i])
				}
			}
			for i := range n {
				wg.Go(func() { errs[i] = b.Detach(ctx, fmt.Sprintf("vol-%d", i), false) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFileBackendReconcile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := NewFileBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"vol-a", "vol-b"} {
		if err := b.CreateVolume(ctx, id, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Attach(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}

	// A restart forgets attachments until state tells the backend about them.
	b2, err := NewFileBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b2.DevicePath("vol-a") != "" {
		t.Fatal("new instance knows an attachment before Reconcile")
	}
	err = b2.Reconcile(ctx, map[string]string{"vol-b": "", "vol-missing": ""})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Reconcile with a missing volume: err = %v, want ErrNotFound", err)
	}
	if got, want := b2.DevicePath("vol-b"), b2.VolumeFile("vol-b"); got != want {
		t.Fatalf("DevicePath(vol-b) = %q, want %q", got, want)
	}
	for _, id := range []string{"vol-a", "vol-missing"} {
		if got := b2.DevicePath(id); got != "" {
			t.Errorf("DevicePath(%s) = %q after Reconcile, want none", id, got)
		}
	}
}
