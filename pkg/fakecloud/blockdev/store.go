package blockdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	volumesDir   = "volumes"
	snapshotsDir = "snapshots"
	imageSuffix  = ".img"
)

// fileStore is the file half shared by both backends: where volumes and snapshots live and how their bytes are
// created, grown, copied and removed. It does no locking; the backends serialise per volume.
type fileStore struct {
	// dataDir is absolute with symlinks resolved, because the kernel reports loop backing files that way and
	// Reconcile compares against it.
	dataDir string
	// durable syncs a new file, and the directory it is renamed into, before the call that made it returns.
	durable bool
}

// Option tunes a backend.
type Option func(*fileStore)

// NoSync skips the fsyncs that make a new volume or snapshot file durable before its call returns: faster,
// but a crash may lose files the state already names. For benchmarks, with the state store's own NoSync.
func NoSync() Option { return func(s *fileStore) { s.durable = false } }

func newFileStore(dataDir string, opts ...Option) (fileStore, error) {
	if dataDir == "" {
		return fileStore{}, errors.New("blockdev: empty data directory")
	}
	for _, sub := range []string{volumesDir, snapshotsDir} {
		if err := os.MkdirAll(filepath.Join(dataDir, sub), 0o750); err != nil {
			return fileStore{}, fmt.Errorf("blockdev: create data directory: %w", err)
		}
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return fileStore{}, fmt.Errorf("blockdev: data directory: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fileStore{}, fmt.Errorf("blockdev: data directory: %w", err)
	}
	s := fileStore{dataDir: resolved, durable: true}
	for _, o := range opts {
		o(&s)
	}
	return s, nil
}

// validateID keeps IDs to a single path element that cannot collide with temporary files (".name.*.tmp").
func validateID(kind, id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") {
		return fmt.Errorf("blockdev: invalid %s id %q", kind, id)
	}
	return nil
}

func (s fileStore) volumesPath() string { return filepath.Join(s.dataDir, volumesDir) }

func (s fileStore) volumeFile(id string) string {
	return filepath.Join(s.dataDir, volumesDir, id+imageSuffix)
}

func (s fileStore) snapshotFile(id string) string {
	return filepath.Join(s.dataDir, snapshotsDir, id+imageSuffix)
}

// volumeIDOf maps a backing file path back to the volume ID when the file is one of this store's volumes.
// Matching is on the exact directory, not a string prefix, so "<dataDir>-other/volumes" never counts.
func (s fileStore) volumeIDOf(path string) (string, bool) { return volumeIDIn(s.volumesPath(), path) }

// volumeIDIn maps path to a volume ID when it names <dir>/<id>.img.
func volumeIDIn(dir, path string) (string, bool) {
	if filepath.Dir(path) != dir {
		return "", false
	}
	name := filepath.Base(path)
	id, ok := strings.CutSuffix(name, imageSuffix)
	if !ok || validateID("volume", id) != nil {
		return "", false
	}
	return id, true
}

// volumeSize returns the current size of the volume file, or ErrNotFound.
func (s fileStore) volumeSize(id string) (int64, error) {
	st, err := os.Stat(s.volumeFile(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("volume %s: %w", id, ErrNotFound)
		}
		return 0, fmt.Errorf("stat volume %s: %w", id, err)
	}
	return st.Size(), nil
}

// checkExisting implements create idempotency: an existing volume of the same size is done (state replays its
// log after a restart), one of a different size is a conflict.
func (s fileStore) checkExisting(id string, sizeBytes int64) (exists bool, err error) {
	cur, err := s.volumeSize(id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cur != sizeBytes {
		return true, fmt.Errorf("volume %s exists with %d bytes, want %d: %w", id, cur, sizeBytes, fs.ErrExist)
	}
	return true, nil
}

func validSize(sizeBytes int64) error {
	if sizeBytes <= 0 {
		return fmt.Errorf("blockdev: invalid size %d", sizeBytes)
	}
	return nil
}

func (s fileStore) createVolume(id string, sizeBytes int64) error {
	if err := validSize(sizeBytes); err != nil {
		return err
	}
	if exists, err := s.checkExisting(id, sizeBytes); exists || err != nil {
		return err
	}
	// Truncating an empty file gives a sparse file: no blocks until the guest writes.
	err := writeFileAtomic(s.volumeFile(id), s.durable, func(f *os.File) error {
		if err := f.Truncate(sizeBytes); err != nil {
			return fmt.Errorf("size volume %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	return nil
}

func (s fileStore) restoreVolume(ctx context.Context, id, snapshotID string, sizeBytes int64) error {
	if err := s.fillVolume(ctx, id, s.snapshotFile(snapshotID), sizeBytes); err != nil {
		return fmt.Errorf("restore volume %s from snapshot %s: %w", id, snapshotID, err)
	}
	return nil
}

func (s fileStore) copyVolume(ctx context.Context, id, sourceID string, sizeBytes int64) error {
	if err := s.fillVolume(ctx, id, s.volumeFile(sourceID), sizeBytes); err != nil {
		return fmt.Errorf("copy volume %s to %s: %w", sourceID, id, err)
	}
	return nil
}

// fillVolume makes the volume's file a copy of src grown to sizeBytes.
func (s fileStore) fillVolume(ctx context.Context, id, src string, sizeBytes int64) error {
	if err := validSize(sizeBytes); err != nil {
		return err
	}
	if exists, err := s.checkExisting(id, sizeBytes); exists || err != nil {
		// The file only appears under its final name once the copy is complete, so an existing file of the
		// right size is a finished copy being replayed.
		return err
	}
	return copyFileAtomic(ctx, s.volumeFile(id), src, sizeBytes, s.durable)
}

// growVolume extends the file to sizeBytes. Growing to the current size is a no-op; shrinking is refused
// because it would silently cut off the guest's data.
func (s fileStore) growVolume(id string, sizeBytes int64) error {
	cur, err := s.volumeSize(id)
	if err != nil {
		return err
	}
	if sizeBytes < cur {
		return fmt.Errorf("resize volume %s: cannot shrink from %d to %d bytes", id, cur, sizeBytes)
	}
	if sizeBytes == cur {
		return nil
	}
	if err := os.Truncate(s.volumeFile(id), sizeBytes); err != nil {
		return fmt.Errorf("resize volume %s: %w", id, err)
	}
	return nil
}

// snapshotExists reports whether the snapshot's file is made (files appear only once complete).
func (s fileStore) snapshotExists(snapshotID string) bool {
	_, err := os.Stat(s.snapshotFile(snapshotID))
	return err == nil
}

// reflinkSnapshot makes the snapshot's file a reflink of the volume's, durably, and says whether the
// filesystem could; it leaves nothing behind when it could not.
func (s fileStore) reflinkSnapshot(snapshotID, volumeID string) (bool, error) {
	src, err := os.Open(s.volumeFile(volumeID))
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("volume %s: %w", volumeID, ErrNotFound)
	} else if err != nil {
		return false, fmt.Errorf("open volume %s: %w", volumeID, err)
	}
	defer src.Close()
	err = writeFileAtomic(s.snapshotFile(snapshotID), s.durable, func(dst *os.File) error {
		if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
			return errNoReflink
		}
		return nil
	})
	if errors.Is(err, errNoReflink) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	return true, nil
}

// errNoReflink: the filesystem cannot share the file's extents.
var errNoReflink = errors.New("reflink unsupported")

func (s fileStore) createSnapshot(ctx context.Context, snapshotID, volumeID string) error {
	if err := copyFileAtomic(ctx, s.snapshotFile(snapshotID), s.volumeFile(volumeID), 0, s.durable); err != nil {
		return fmt.Errorf("snapshot %s of volume %s: %w", snapshotID, volumeID, err)
	}
	return nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func (s fileStore) removeVolume(id string) error   { return removeFile(s.volumeFile(id)) }
func (s fileStore) removeSnapshot(id string) error { return removeFile(s.snapshotFile(id)) }

// removeTemporary removes the hidden temporary files (".<id>.img.*.tmp", writeFileAtomic's) of both
// subdirectories.
func (s fileStore) removeTemporary() error {
	var errs []error
	for _, sub := range []string{volumesDir, snapshotsDir} {
		entries, err := os.ReadDir(filepath.Join(s.dataDir, sub))
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", sub, err))
			continue
		}
		for _, e := range entries {
			if name := e.Name(); strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") && e.Type().IsRegular() {
				errs = append(errs, removeFile(filepath.Join(s.dataDir, sub, name)))
			}
		}
	}
	return errors.Join(errs...)
}

// ids lists the IDs of the finished files in a subdirectory; hidden temporary files are skipped.
func (s fileStore) ids(sub string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dataDir, sub))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", sub, err)
	}
	var out []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), imageSuffix)
		if ok && e.Type().IsRegular() && validateID(sub, id) == nil {
			out = append(out, id)
		}
	}
	return out, nil
}
