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
// proof, and the caller asks blkid as before.
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
	"slices"
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

// Blank reports whether the block device at path is provably blank. false without an error means it could not
// be proven: a non-zero byte where blkid looks, or a device outside the envelope the proof holds for.
func Blank(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0)
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false, nil
	}
	size, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return false, fmt.Errorf("BLKGETSIZE64 %s: %w", path, err)
	}
	sector, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
	if err != nil {
		return false, fmt.Errorf("BLKSSZGET %s: %w", path, err)
	}
	zone, err := unix.IoctlGetUint32(fd, blkGetZoneSz)
	if err != nil {
		return false, fmt.Errorf("BLKGETZONESZ %s: %w", path, err)
	}
	regions := Regions(int64(size))
	if regions == nil || zone != 0 || !slices.Contains(sectorSizes[:], sector) || removableMedia(fd, st.Rdev) {
		return false, nil
	}
	if !wholeDisk(st.Rdev) {
		return false, nil
	}
	blank, err := allZero(fd, regions)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return blank, nil
}

// readers is how many reads are in flight at once: two finish a quarter sooner than one on a loop device,
// more gain nothing.
const readers = 2

// allZero reads the regions in readChunk pieces, readers at a time, and reports whether every byte is zero.
// A reader stops at the first non-zero byte it reads, or when the other has found one.
func allZero(fd int, regions []Region) (bool, error) {
	var pieces []Region
	for _, r := range regions {
		for off := r.Off; off < r.end(); off += readChunk {
			pieces = append(pieces, Region{off, min(readChunk, r.end()-off)})
		}
	}
	var (
		wg      sync.WaitGroup
		nonZero atomic.Bool
		errs    [readers]error
	)
	for i := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, zero := alignedBuffer(readChunk), make([]byte, readChunk)
			for j := i; j < len(pieces) && !nonZero.Load(); j += readers {
				p := pieces[j]
				b := buf[:p.Len]
				if err := preadFull(fd, b, p.Off); err != nil {
					errs[i] = fmt.Errorf("at %d: %w", p.Off, err)
					return
				}
				if !bytes.Equal(b, zero[:p.Len]) {
					nonZero.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if nonZero.Load() {
		return false, nil
	}
	if err := errors.Join(errs[:]...); err != nil {
		return false, err
	}
	return true, nil
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
