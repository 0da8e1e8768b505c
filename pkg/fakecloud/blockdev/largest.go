package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// LargestEBSVolume is the largest size EBS offers (gp3 and io2: 64 TiB).
const LargestEBSVolume = int64(65536) << 30

// FileSystem describes the filesystem under a data directory: its type, and the largest file it can hold up to
// LargestEBSVolume. ext4 with 4 KiB blocks, for one, holds at most 16 TiB − 4 KiB, less than a 16,384 GiB gp2.
type FileSystem struct {
	Type        string
	LargestFile int64
}

// Probe finds the filesystem of dataDir and the largest (sparse) file it holds, by growing a temporary file
// until the kernel refuses (EFBIG). A sparse file takes no blocks, so the probe needs no space.
func Probe(dataDir string) (FileSystem, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dataDir, &st); err != nil {
		return FileSystem{}, fmt.Errorf("statfs %s: %w", dataDir, err)
	}
	fs := FileSystem{Type: fsTypeName(int64(st.Type))}
	f, err := os.CreateTemp(filepath.Join(dataDir, volumesDir), ".probe.*.tmp")
	if err != nil {
		return fs, fmt.Errorf("probe file size: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	fits := func(size int64) (bool, error) {
		err := f.Truncate(size)
		if errors.Is(err, unix.EFBIG) || errors.Is(err, unix.EINVAL) {
			return false, nil
		}
		return err == nil, err
	}
	if ok, err := fits(LargestEBSVolume); ok || err != nil {
		fs.LargestFile = LargestEBSVolume
		return fs, err
	}
	// Binary search in 4 KiB steps: lo always fits, hi never does.
	lo, hi := int64(0), LargestEBSVolume
	for hi-lo > 4096 {
		mid := lo + (hi-lo)/2/4096*4096
		ok, err := fits(mid)
		if err != nil {
			return fs, fmt.Errorf("probe file size: %w", err)
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	fs.LargestFile = lo
	return fs, nil
}

// fsTypeName names the filesystems a data directory is commonly on.
func fsTypeName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext2/3/4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("0x%x", magic)
}
