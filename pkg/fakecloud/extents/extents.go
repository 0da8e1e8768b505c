// Package extents walks the data extents of a sparse file, so that copies read and write only the data and
// holes stay holes.
package extents

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Each calls fn for each data extent of f within [off, end), in order, clipped to the range. On a filesystem
// without an extent map (SEEK_DATA unsupported) it calls fn once for the whole rest with mapped false, and the
// caller decides how to skip zeros. The first error of fn ends the walk.
func Each(f *os.File, off, end int64, fn func(off, n int64, mapped bool) error) error {
	fd := int(f.Fd())
	for off < end {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			return nil // nothing but hole from off to the end
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
			return fn(off, end-off, false)
		case err != nil:
			return fmt.Errorf("seek data in %s: %w", f.Name(), err)
		}
		if data >= end {
			return nil
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole in %s: %w", f.Name(), err)
		}
		hole = min(hole, end)
		if err := fn(data, hole-data, true); err != nil {
			return err
		}
		off = hole
	}
	return nil
}
