package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The node plugin runs privileged on the host: every path and ID in a request is checked for its shape before
// anything is looked up, and every mount is checked to be of the volume's own device before it is used,
// unmounted or reported on.

// volumeIDPattern is the shape of the volume IDs the cloud issues (EC2: "vol-" and 8 or 17 hex digits).
var volumeIDPattern = regexp.MustCompile(`^vol-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)

// maxPathLen is PATH_MAX: the kernel refuses longer paths anyway.
const maxPathLen = 4096

// checkVolumeID refuses an ID the cloud cannot have issued: it names no volume (NotFound, as the controller
// answers), and is refused at once rather than after waiting for a device that cannot appear.
func checkVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume ID is required")
	}
	if !volumeIDPattern.MatchString(id) {
		shown := id
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return status.Errorf(codes.NotFound, "volume %q does not exist: not a volume ID (vol- and 8 or 17 hex digits)", shown)
	}
	return nil
}

// pathShapeError says why p cannot be a path the CO gives a node plugin: it must be absolute and clean
// (filepath.Clean(p) == p, so no "..", "." or doubled slashes) and fit PATH_MAX. nil when p is fine.
func pathShapeError(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is required", field)
	case len(p) > maxPathLen:
		return fmt.Errorf("%s is longer than %d bytes", field, maxPathLen)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%s contains a NUL byte", field)
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return fmt.Errorf("%s %q must be an absolute, clean path", field, p)
	}
	return nil
}

// checkPaths validates the non-empty paths of a request (name, value pairs): InvalidArgument for the first
// that is malformed.
func checkPaths(namesAndPaths ...string) error {
	for i := 0; i+1 < len(namesAndPaths); i += 2 {
		if err := pathShapeError(namesAndPaths[i], namesAndPaths[i+1]); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return nil
}

// checkVolumePath is for calls that ask about the volume at a path (stats, expand): a path that is not absolute
// and clean cannot be where the volume was staged or published, so the volume does not exist there (NotFound,
// which the spec and csi-sanity ask for), and nothing at that path is looked at.
func checkVolumePath(volumeID, p string) error {
	if p == "" {
		return status.Error(codes.InvalidArgument, "volume path is required")
	}
	if err := pathShapeError("volume path", p); err != nil {
		return status.Errorf(codes.NotFound, "volume %s is not at %q: %v", volumeID, p, err)
	}
	return nil
}

// errForeignPath: the path holds a mount or data that is not the volume's; it is left untouched.
var errForeignPath = errors.New("path holds something that is not this volume's")

// volumeMountAt returns the topmost mount on path when it serves one of the devices owns accepts. A missing
// path is fs.ErrNotExist; mounted is false when nothing is mounted there; a mount of another device is
// errForeignPath.
func volumeMountAt(h host, path string, owns func(rdev uint64) (bool, error)) (mi *mountinfo.Info, mounted bool, err error) {
	mi, mounted, err = mountAt(h, path)
	if err != nil || !mounted {
		return nil, false, err
	}
	dev := mountedDevice(h, mi, path)
	ok, err := owns(dev)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, false, fmt.Errorf("%w: %s is a mount of %s (%d:%d), left untouched", errForeignPath, path,
			mi.Source, unix.Major(dev), unix.Minor(dev))
	}
	return mi, true, nil
}

// mountPointMarker is the extended attribute by which the node recognises a mount point it created for a
// volume (its value is the volume ID), so that a retried unpublish removes that and nothing else.
const mountPointMarker = "user.diskforge.volume"

// prepareMountPoint makes path ready to be mounted on: a missing path is created (a directory, or for block an
// empty file; its parent must exist) and marked as the volume's; an existing one must be an empty directory
// (or empty regular file for block). Anything else (a non-empty directory, a symlink, a device) is
// errPathInUse: mounting over it would hide or redirect data that is not the volume's.
func prepareMountPoint(path, volumeID string, file bool) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(path)
		if pst, err := os.Stat(parent); err != nil || !pst.IsDir() {
			return status.Errorf(codes.FailedPrecondition, "parent directory %s of %s does not exist: the CO creates it", parent, path)
		}
		if file {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o640)
			if err != nil {
				return err
			}
			_ = f.Close()
		} else if err := os.Mkdir(path, 0o750); err != nil {
			return err
		}
		// Best effort: without user xattrs (rare) a retried unpublish leaves the empty mount point to the CO.
		_ = unix.Setxattr(path, mountPointMarker, []byte(volumeID), 0)
		return nil
	}
	if err != nil {
		return err
	}
	if reusableMountPoint(path, st, file) {
		return nil
	}
	want := "directory"
	if file {
		want = "regular file"
	}
	return fmt.Errorf("%w: %s (%s) is not an empty %s; it is left untouched", errPathInUse, path, st.Mode().Type(), want)
}

// reusableMountPoint: path (described by st, not followed) is an empty directory, or for block an empty
// regular file: what the node would have created itself.
func reusableMountPoint(path string, st fs.FileInfo, file bool) bool {
	if file {
		return st.Mode().IsRegular() && st.Size() == 0
	}
	if !st.IsDir() {
		return false
	}
	d, err := os.Open(path)
	if err != nil {
		return false
	}
	defer d.Close()
	_, err = d.Readdirnames(1)
	return errors.Is(err, io.EOF)
}

// removeMountPoint removes path after its mount is gone, when it is what publish would have created: an empty
// directory or empty file, that this call just unmounted or that carries the volume's marker. It returns
// whether path is gone.
func removeMountPoint(path, volumeID string, unmounted bool) (bool, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if !reusableMountPoint(path, st, st.Mode().IsRegular()) {
		return false, nil
	}
	if !unmounted {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(path, mountPointMarker, buf)
		if err != nil || string(buf[:n]) != volumeID {
			return false, nil
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
