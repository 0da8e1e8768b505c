package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/fakecloud/extents"
	"k8s.io/klog/v2"
)

// copyChunk bounds one copy_file_range or read/write step, so a cancelled context is noticed within a few
// megabytes of work.
const copyChunk = 8 << 20

// copyFileAtomic makes dstPath a copy of srcPath's bytes, grown to growTo bytes when that is larger than the
// source. The copy is written to a temporary file next to dstPath and renamed into place, so a crash never
// leaves a half-copied file under the final name; durable as for writeFileAtomic.
func copyFileAtomic(ctx context.Context, dstPath, srcPath string, growTo int64, durable bool) error {
	src, err := os.Open(srcPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", srcPath, ErrNotFound)
		}
		return fmt.Errorf("open source: %w", err)
	}
	defer src.Close()

	// Flush the source first: some filesystems answer SEEK_DATA from allocated extents only, and delayed
	// allocation could hide freshly written data from the extent walk.
	if err := src.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", srcPath, err)
	}
	st, err := src.Stat()
	if err != nil {
		return fmt.Errorf("stat source: %w", err)
	}
	size := st.Size()
	if growTo != 0 && growTo < size {
		return fmt.Errorf("target size %d is smaller than source %s of %d bytes", growTo, srcPath, size)
	}

	return writeFileAtomic(dstPath, durable, func(dst *os.File) error {
		if err := cloneOrCopy(ctx, dst, src, size); err != nil {
			return err
		}
		if growTo > size {
			if err := dst.Truncate(growTo); err != nil {
				return fmt.Errorf("grow copy to %d: %w", growTo, err)
			}
		}
		return nil
	})
}

// writeFileAtomic lets fill write a temporary file in path's directory, then renames it to path; durable syncs
// the file before and the directory after. On any error the temporary file is removed and path is left as it
// was.
func writeFileAtomic(path string, durable bool, fill func(*os.File) error) error {
	tmp, err := tempFor(path)
	if err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		discardTemp(tmp)
		return err
	}
	return commitTemp(tmp, path, durable)
}

// tempFor creates the hidden temporary file a copy to path is written to (RemoveTemporaryFiles removes one a
// crash left).
func tempFor(path string) (*os.File, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create temporary file: %w", err)
	}
	return tmp, nil
}

// discardTemp closes and removes a temporary file.
func discardTemp(tmp *os.File) {
	_ = tmp.Close()
	_ = os.Remove(tmp.Name())
}

// commitTemp renames the complete temporary file to path, syncing the file before and the directory after when
// durable; on error the temporary file is removed.
func commitTemp(tmp *os.File, path string, durable bool) (err error) {
	defer func() {
		if err != nil {
			discardTemp(tmp)
		}
	}()
	if durable {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	if !durable {
		return nil
	}
	return syncDir(filepath.Dir(path))
}

// syncDir makes a rename or unlink in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// cloneOrCopy fills the empty file dst with the first size bytes of src. A reflink shares extents and is
// instant where the filesystem supports it (btrfs, XFS); anywhere else the sparse copy is used.
func cloneOrCopy(ctx context.Context, dst, src *os.File, size int64) error {
	err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	if err == nil {
		return nil
	}
	// Any failure falls back: the set of "not supported" errnos differs per filesystem (EOPNOTSUPP, EXDEV,
	// EINVAL, ENOTTY), and a real I/O problem will show up again in the copy.
	klog.V(5).InfoS("Reflink unavailable, using sparse copy", "src", src.Name(), "err", err)
	return sparseCopy(ctx, dst, src, size)
}

// sparseCopy copies only the data extents of src into dst, which it first sizes to size. Holes in src are never
// read or written, so they stay holes in dst and a mostly empty volume costs almost nothing to snapshot.
func sparseCopy(ctx context.Context, dst, src *os.File, size int64) error {
	if err := dst.Truncate(size); err != nil {
		return fmt.Errorf("size copy to %d: %w", size, err)
	}
	return extents.Each(src, 0, size, func(off, n int64, mapped bool) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !mapped {
			// No extent map on this filesystem: copy the rest block by block, skipping zeros.
			return bufferedCopy(ctx, dst, src, off, n)
		}
		return copyRange(ctx, dst, src, off, n)
	})
}

// copyRange copies n bytes at off from src to the same offset in dst, in the kernel where it can.
func copyRange(ctx context.Context, dst, src *os.File, off, n int64) error {
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		roff, woff := off, off
		w, err := unix.CopyFileRange(int(src.Fd()), &roff, int(dst.Fd()), &woff, int(min(n, copyChunk)), 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EOPNOTSUPP) ||
				errors.Is(err, unix.EINVAL) {
				return bufferedCopy(ctx, dst, src, off, n)
			}
			return fmt.Errorf("copy_file_range at %d: %w", off, err)
		}
		if w == 0 {
			return fmt.Errorf("copy %s at %d: %w", src.Name(), off, io.ErrUnexpectedEOF)
		}
		off += int64(w)
		n -= int64(w)
	}
	return nil
}

// zeroBlock is the granularity at which bufferedCopy leaves zeros unwritten; filesystems allocate in blocks of
// this size, so skipping smaller runs would save nothing.
const zeroBlock = 4096

// bufferedCopy is the portable path: read and write through a buffer, leaving all-zero blocks unwritten
// because dst was already sized and reads zeros there.
func bufferedCopy(ctx context.Context, dst, src *os.File, off, n int64) error {
	buf := make([]byte, min(n, copyChunk))
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := buf[:min(n, int64(len(buf)))]
		r, err := src.ReadAt(chunk, off)
		if r == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read %s at %d: %w", src.Name(), off, err)
		}
		if err := writeNonZero(dst, chunk[:r], off); err != nil {
			return err
		}
		off += int64(r)
		n -= int64(r)
	}
	return nil
}

// writeNonZero writes the runs of b that contain non-zero blocks, one write per run.
func writeNonZero(dst *os.File, b []byte, off int64) error {
	var zero [zeroBlock]byte
	start := -1 // start of the current non-zero run
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		if _, err := dst.WriteAt(b[start:end], off+int64(start)); err != nil {
			return fmt.Errorf("write %s at %d: %w", dst.Name(), off+int64(start), err)
		}
		start = -1
		return nil
	}
	for i := 0; i < len(b); i += zeroBlock {
		blk := b[i:min(i+zeroBlock, len(b))]
		if bytes.Equal(blk, zero[:len(blk)]) {
			if err := flush(i); err != nil {
				return err
			}
		} else if start < 0 {
			start = i
		}
	}
	return flush(len(b))
}
