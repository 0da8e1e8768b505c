// Package blkprobe proves, without running blkid, that a block device is blank: that `blkid -p` (superblock
// and partition probing, as mount-utils runs it before formatting) would find nothing on it.
//
// blkid's probing is a deterministic function of the device's properties it asks the kernel for (size,
// logical sector size, zone size, whether it is a floppy, a CD-ROM or a partition) and of the bytes it reads
// (device-mapper's private devices it skips, finding nothing whatever they hold). On a device of zeros every prober reads its fixed places, offsets from the start and from the end,
// finds no magic and gives up, so the set of bytes read is fixed. If those bytes are zero on a device with the
// same properties, blkid's run on it reads exactly what it reads on a blank device, takes the same branches and
// reports the same thing: nothing. So the device is blank. Regions returns a superset of that read set, with
// room to spare, for the devices the set was measured on; TestRegionsCoverBlkidReads straces the installed
// blkid on blank loop devices of several sizes and sector sizes and fails when blkid reads outside it.
//
// Anything else (a non-zero byte in the regions, a device outside the measured envelope, an error) is not a
// proof, and the caller asks blkid as before. The read set is blkid's of the releases in measuredVersions: a
// caller checks the installed one with Measured before trusting the proof.
//
// Probe also answers the question a caller asks after blkid found nothing: is the device new (zeros where
// blkid looks) or does it hold data blkid does not recognise (a raw block volume, a restored snapshot of one)?
// It reports the first non-zero byte of the regions, or of the whole device below the envelope (where the
// regions are unknown, reading everything proves the zeros).
//
// blkid reads through the page cache; Blank reads with O_DIRECT, which costs half as much on a loop device
// and sees the same bytes: a direct read first writes back the dirty cached pages of its range, and clean
// cached pages hold what the device holds (and the kernel drops a block device's cache when its last opener
// closes it, so a volume no one holds open has none). Direct reads need aligned offsets, lengths and memory:
// the regions are whole 4 KiB pages (or end at the device's end, a whole number of sectors).
package blkprobe

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The envelope in which blkid's read set was measured: smaller devices, other sector sizes and zoned devices
// make probers read elsewhere (or not at all), and are left to blkid.
const (
	minSize = 64 << 20
	// blkGetZoneSz is BLKGETZONESZ, _IOR(0x12, 132, __u32), in the generic ioctl encoding (amd64, arm64). On an
	// architecture that encodes it otherwise the ioctl fails, which only means blkid is asked.
	blkGetZoneSz = 0x80041284
	// cdromGetCapability is CDROM_GET_CAPABILITY; it fails on anything but a CD-ROM drive.
	cdromGetCapability = 0x5331
	// floppyMajor is the floppy driver's block major.
	floppyMajor = 2
)

// measuredVersions are the util-linux releases whose blkid -p (and libblkid) reads were measured to lie inside
// Regions (TestRegionsCoverBlkidReads). Another release may probe elsewhere: add it once that test passes with
// it installed.
var measuredVersions = [...]string{"2.38.1"}

// blkidVersionLine is the first line of `blkid -V`: "blkid from util-linux 2.38.1  (libblkid 2.38.1, 04-Aug-2022)".
var blkidVersionLine = regexp.MustCompile(`^blkid from util-linux (\S+)\s+\(libblkid ([^,\s]+)`)

// Measured reports whether the output of `blkid -V` names a blkid and a libblkid of a release the read set was
// measured on: only then does Blank's proof stand for what the installed blkid would find.
func Measured(blkidV string) bool {
	m := blkidVersionLine.FindStringSubmatch(strings.TrimSpace(blkidV))
	return m != nil && slices.Contains(measuredVersions[:], m[1]) && slices.Contains(measuredVersions[:], m[2])
}

// MeasuredVersions lists the util-linux releases Measured accepts.
func MeasuredVersions() []string { return slices.Clone(measuredVersions[:]) }

// sectorSizes are the logical sector sizes the read set was measured with (EBS volumes have 512, 4Kn disks 4096).
var sectorSizes = [...]int{512, 4096}

// Region is a byte range of a device.
type Region struct {
	Off, Len int64
}

func (r Region) end() int64 { return r.Off + r.Len }

// What blkid 2.38 reads of a blank device (measured with strace; see the test), widened to the 64 KiB blocks
// around each read:
//   - from the start: the first 516 KiB (MBR, GPT, the ext/xfs/btrfs/... superblocks, ZFS's first two
//     256 KiB labels) and 512 B–1 KiB at 1, 2 and 4 MiB;
//   - from the end: ZFS's last two labels (512 KiB below the size rounded down to 256 KiB, so at most 768 KiB
//     from the end), the MD 0.90 and 1.0 superblocks, DDF's anchor and the other firmware RAIDs' metadata,
//     all within the last 512 KiB but Promise's deepest copy, 3087 sectors (1.51 MiB) below the end.
//
// Every read costs (about 0.2 ms per 128 KiB on a loop device): this is 1.8 MiB, under half of the first and
// last 2 MiB.
const window = 64 << 10

// page is the alignment of the regions and of the read buffer: the largest logical sector size supported.
const page = 4096

// fromStart are offsets from the device's start.
var fromStart = [...]Region{{0, 576 << 10}, {1 << 20, window}, {2 << 20, window}, {4 << 20, window}}

// fromEnd are distances from the device's end (Off) and lengths.
var fromEnd = [...]Region{{3087*512 + window/2, window}, {1 << 20, 1 << 20}}

// Regions returns the byte ranges of a device of size bytes that must be zero for it to be blank: sorted,
// disjoint, in whole pages; nil when size is outside the measured envelope.
func Regions(size int64) []Region {
	if size < minSize {
		return nil
	}
	rs := slices.Clone(fromStart[:])
	for _, r := range fromEnd {
		// Widened to whole pages, so that direct reads can read it.
		off := (size - r.Off) &^ (page - 1)
		end := min(size, (size-r.Off+r.Len+page-1)&^(page-1))
		rs = append(rs, Region{off, end - off})
	}
	slices.SortFunc(rs, func(a, b Region) int { return cmp.Compare(a.Off, b.Off) })
	// Merge overlaps and neighbours (on a small device the ends come close).
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Off <= last.end() {
			last.Len = max(last.end(), r.end()) - last.Off
			continue
		}
		out = append(out, r)
	}
	return out
}

// readChunk is the size of one read: on a loop device, reads of 64–128 KiB finish soonest.
const readChunk = 128 << 10

// ErrNotBlockDevice: Probe was given something other than a block device.
var ErrNotBlockDevice = errors.New("not a block device")

// Result is what Probe found on a device.
type Result struct {
	// Blank: the device is inside the envelope the read set was measured in and every byte blkid -p would read
	// of it is zero, so blkid would find nothing.
	Blank bool
	// NonZero is the offset of the first non-zero byte where blkid looks (Regions, or the whole device below
	// the envelope), -1 when there is none.
	NonZero int64
}

// Blank reports whether the block device at path is provably blank. false without an error means it could not
// be proven: a non-zero byte where blkid looks, a device outside the envelope the proof holds for, or not a
// block device at all.
func Blank(path string) (bool, error) {
	r, err := Probe(path)
	if errors.Is(err, ErrNotBlockDevice) {
		return false, nil
	}
	return r.Blank, err
}

// Probe reads what blkid would read of the block device at path (see Result). It stops at the first
// non-zero byte, so a device holding a filesystem costs a read or two.
func Probe(path string) (Result, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0)
	if err != nil {
		return Result{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Result{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Result{}, fmt.Errorf("%s: %w", path, ErrNotBlockDevice)
	}
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return Result{}, fmt.Errorf("BLKGETSIZE64 %s: %w", path, err)
	}
	sector, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
	if err != nil {
		return Result{}, fmt.Errorf("BLKSSZGET %s: %w", path, err)
	}
	regions := Regions(int64(size))
	measured := regions != nil && slices.Contains(sectorSizes[:], sector) && unzoned(fd) &&
		!removableMedia(fd, st.Rdev) && wholeDisk(st.Rdev)
	if regions == nil {
		// Below the envelope: the whole device, a whole number of sectors, is what proves it holds zeros.
		regions = []Region{{0, int64(size)}}
	}
	nonZero, err := firstNonZero(fd, regions)
	if err != nil {
		return Result{}, fmt.Errorf("read %s: %w", path, err)
	}
	return Result{Blank: measured && nonZero < 0, NonZero: nonZero}, nil
}

// unzoned reports a device without zones (BLKGETZONESZ answers 0). An architecture that encodes the ioctl
// otherwise fails it, which only means blkid is asked.
func unzoned(fd int) bool {
	zone, err := unix.IoctlGetUint32(fd, blkGetZoneSz)
	return err == nil && zone == 0
}

// readers is how many reads are in flight at once: two finish a quarter sooner than one on a loop device,
// more gain nothing.
const readers = 2

// firstNonZero reads the regions in readChunk pieces, readers at a time, and returns the offset of the first
// non-zero byte, -1 when every byte is zero. Pieces are taken in order, and a reader stops at the first piece
// past the lowest one found non-zero so far: the pieces below it are all read, the answer is the first.
func firstNonZero(fd int, regions []Region) (int64, error) {
	var pieces []Region
	for _, r := range regions {
		for off := r.Off; off < r.end(); off += readChunk {
			pieces = append(pieces, Region{off, min(readChunk, r.end()-off)})
		}
	}
	var (
		wg     sync.WaitGroup
		lowest atomic.Int64 // index of the lowest non-zero piece found
		found  [readers]int64
		errs   [readers]error
	)
	lowest.Store(int64(len(pieces)))
	for i := range readers {
		found[i] = -1
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, zero := alignedBuffer(readChunk), make([]byte, readChunk)
			for j := i; j < len(pieces) && int64(j) < lowest.Load(); j += readers {
				p := pieces[j]
				b := buf[:p.Len]
				if err := preadFull(fd, b, p.Off); err != nil {
					errs[i] = fmt.Errorf("at %d: %w", p.Off, err)
					return
				}
				if !bytes.Equal(b, zero[:p.Len]) {
					found[i] = p.Off + int64(slices.IndexFunc(b, func(c byte) bool { return c != 0 }))
					lowerTo(&lowest, int64(j))
					return
				}
			}
		}()
	}
	wg.Wait()
	first := int64(-1)
	for _, off := range found {
		if off >= 0 && (first < 0 || off < first) {
			first = off
		}
	}
	if first >= 0 {
		return first, nil
	}
	return -1, errors.Join(errs[:]...)
}

// lowerTo sets a to v unless it is already lower.
func lowerTo(a *atomic.Int64, v int64) {
	for cur := a.Load(); v < cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
	}
}

// removableMedia reports a floppy or CD-ROM drive, for which blkid probes differently (it asks the drive, and
// reads only what is written).
func removableMedia(fd int, rdev uint64) bool {
	if unix.Major(rdev) == floppyMajor {
		return true
	}
	_, err := unix.IoctlRetInt(fd, cdromGetCapability)
	return err == nil
}

// wholeDisk reports whether sysfs knows the device and it is not a partition: blkid looks at a partition's
// whole disk too, and the proof covers whole disks only.
func wholeDisk(rdev uint64) bool {
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(rdev), unix.Minor(rdev))
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	_, err := os.Stat(dir + "/partition")
	return errors.Is(err, fs.ErrNotExist)
}

// alignedBuffer returns n bytes starting at a page boundary (Go's heap does not move objects).
func alignedBuffer(n int) []byte {
	b := make([]byte, n+page)
	skip := (page - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%page)) % page
	return b[skip : skip+n]
}

func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pread(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
