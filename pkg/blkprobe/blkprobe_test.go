package blkprobe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// mountUtilsProbe is the probe mount-utils' GetDiskFormat runs: superblocks and partition tables, low-level.
var mountUtilsProbe = []string{"-p", "-s", "TYPE", "-s", "PTTYPE", "-o", "export"}

// loopDevice is testutil.LoopDevice in a directory of the test's own.
func loopDevice(t *testing.T, size int64, sector int, prepare func(file string)) string {
	t.Helper()
	return testutil.LoopDevice(t, t.TempDir(), size, sector, prepare)
}

func requireLoop(t *testing.T, tools ...string) {
	t.Helper()
	testutil.SkipUnless(t, blockdev.Available(), "blank probing is checked on real loop devices: need root and /dev/loop-control")
	testutil.RequireTools(t, append([]string{"losetup", "blkid"}, tools...)...)
}

// traceLine is one syscall of strace -y on an fd: name, fd path, the rest of the arguments, the result.
var traceLine = regexp.MustCompile(`^(?:\d+ +)?(\w+)\((\d+)<([^>]*)>(.*)\) += (-?\d+)`)

// openLine is an open of a path that returned an fd of the device (strace -y): the fd.
var openLine = regexp.MustCompile(`^(?:\d+ +)?open(?:at)?\(.*\) += (\d+)<`)

// blkidReads runs blkid as mount-utils does under strace and returns the byte ranges it read of dev, and
// blkid's exit code. Every syscall on the device is accounted for: one that reads in a way not modelled here
// (readv, mmap, ...) fails the test instead of being missed.
func blkidReads(t *testing.T, dev string) ([]Region, int) {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "blkid.trace")
	cmd := exec.Command("strace", append([]string{"-f", "-y", "-qq", "-s", "0", "-e", "signal=none", "-e", "trace=%desc",
		"-o", trace, "blkid"}, append(mountUtilsProbe, dev)...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("strace blkid %s: %v: %s", dev, err, out)
	}
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var reads []Region
	pos := map[string]int64{} // fd -> file position
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "<"+dev+">") {
			continue
		}
		if m := openLine.FindStringSubmatch(line); m != nil {
			pos[m[1]] = 0 // a new open file of the device starts at 0
			continue
		}
		m := traceLine.FindStringSubmatch(line)
		if m == nil || m[3] != dev {
			if strings.HasPrefix(strings.TrimLeft(line, "0123456789 "), "newfstatat(AT_FDCWD") {
				continue // a stat by name
			}
			t.Errorf("unmodelled use of %s: %s", dev, line)
			continue
		}
		name, fd, args := m[1], m[2], strings.Split(strings.TrimPrefix(m[4], ", "), ", ")
		ret, _ := strconv.ParseInt(m[5], 10, 64)
		switch name {
		case "lseek":
			if ret >= 0 {
				pos[fd] = ret
			}
		case "read":
			if ret > 0 {
				reads = append(reads, Region{pos[fd], ret})
				pos[fd] += ret
			}
		case "pread64":
			off, err := strconv.ParseInt(args[len(args)-1], 10, 64)
			if err != nil {
				t.Fatalf("offset of %q: %v", line, err)
			}
			if ret > 0 {
				reads = append(reads, Region{off, ret})
			}
		case "ioctl", "fadvise64", "newfstatat", "fstat", "close", "fcntl", "openat", "faccessat2":
		default:
			t.Errorf("unmodelled syscall on %s: %s", dev, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return reads, code
}

// TestRegionsCoverBlkidReads: on blank devices of several sizes and sector sizes, blkid (as mount-utils runs
// it) finds nothing and reads only bytes inside Regions, and Blank proves the device blank. This is what makes
// Blank's answer blkid's: a blkid that reads elsewhere fails here.
func TestRegionsCoverBlkidReads(t *testing.T) {
	requireLoop(t, "strace")
	sizes := []int64{64 * mib, 300 * mib, gib, gib + 512, gib + 4*kib, gib + 65*kib, gib + 255*kib, gib + mib + 4*kib,
		10 * gib, 10*gib + 3*512, 1 << 40}
	for _, sector := range sectorSizes {
		for _, size := range sizes {
			if size%int64(sector) != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%d bytes, %d-byte sectors", size, sector), func(t *testing.T) {
				dev := loopDevice(t, size, sector, nil)
				reads, code := blkidReads(t, dev)
				if code != 2 {
					t.Fatalf("blkid on a blank device exited %d, want 2 (nothing found)", code)
				}
				if len(reads) == 0 {
					t.Fatal("blkid read nothing of the device: the trace is not what this test expects")
				}
				regions := Regions(size)
				for _, r := range reads {
					if !covered(regions, r) {
						t.Errorf("blkid read [%d, %d) (%d from the end), outside %v", r.Off, r.end(), size-r.Off, regions)
					}
				}
				if blank, err := Blank(dev); err != nil || !blank {
					t.Errorf("Blank(%s) = %v, %v; want true", dev, blank, err)
				}
			})
		}
	}
	// The node trusts Blank only for the releases listed; one this test passes with can be added.
	if out, err := exec.Command("blkid", "-V").Output(); err == nil && !Measured(string(out)) && !t.Failed() {
		t.Logf("blkid reads inside Regions here, but %q is not among the measured versions %v: add it", strings.TrimSpace(string(out)), MeasuredVersions())
	}
}

func covered(regions []Region, r Region) bool {
	for _, c := range regions {
		if r.Off >= c.Off && r.end() <= c.end() {
			return true
		}
	}
	return false
}

// TestNotBlank: devices carrying real signatures, at the start or only at the end, are never proven blank.
func TestNotBlank(t *testing.T) {
	requireLoop(t, "mkfs.ext4", "mkfs.xfs", "mkswap", "sfdisk")
	const size = 320 * mib // mkfs.xfs needs 300 MiB
	run := func(t *testing.T, stdin, name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
	}
	writeAt := func(t *testing.T, file string, off int64, b []byte) {
		f, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(b, off)
		if err := errors.Join(err, f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, file string)
		// blkid is what blkid must report, showing that the signature is one it knows ("" when blkid itself
		// may see nothing, as with a GPT backup header whose primary is gone).
		blkid string
	}{
		{"ext4", func(t *testing.T, f string) { run(t, "", "mkfs.ext4", "-q", "-F", f) }, "TYPE=ext4"},
		{"xfs", func(t *testing.T, f string) { run(t, "", "mkfs.xfs", "-q", "-f", f) }, "TYPE=xfs"},
		{"swap", func(t *testing.T, f string) { run(t, "", "mkswap", f) }, "TYPE=swap"},
		{"dos partition table", func(t *testing.T, f string) { run(t, "label: dos\n,16MiB\n", "sfdisk", "-q", f) }, "PTTYPE=dos"},
		{"gpt partition table", func(t *testing.T, f string) { run(t, "label: gpt\n,16MiB\n", "sfdisk", "-q", f) }, "PTTYPE=gpt"},
		{"gpt backup header only", func(t *testing.T, f string) {
			run(t, "label: gpt\n,16MiB\n", "sfdisk", "-q", f)
			writeAt(t, f, 0, make([]byte, mib)) // the protective MBR and the primary header and entries
		}, ""},
		{"md 0.90 superblock at the end", func(t *testing.T, f string) {
			// The superblock lies in the last 64 KiB-aligned 64 KiB: magic a92b4efc, version 0.90.
			writeAt(t, f, size&^(64*kib-1)-64*kib, []byte{0xfc, 0x4e, 0x2b, 0xa9, 0, 0, 0, 0, 90, 0, 0, 0})
		}, "TYPE=linux_raid_member"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := loopDevice(t, size, 512, func(file string) { tc.prepare(t, file) })
			out, _ := exec.Command("blkid", append(mountUtilsProbe, dev)...).Output()
			if tc.blkid != "" && !strings.Contains(string(out), tc.blkid) {
				t.Fatalf("blkid does not see the signature (%s): %s", tc.blkid, out)
			}
			if blank, err := Blank(dev); err != nil || blank {
				t.Errorf("Blank(%s) = %v, %v; want false (blkid: %q)", dev, blank, err, out)
			}
		})
	}
}

// TestBlankReadsEveryRegion: one non-zero byte at either edge of any region makes a device not blank, and
// the device is blank again once the byte is zero: Blank reads what Regions names, and its direct reads see
// what was just written through the page cache (still dirty there: the device is held open meanwhile).
func TestBlankReadsEveryRegion(t *testing.T) {
	requireLoop(t)
	const size = gib + 4*kib
	dev := loopDevice(t, size, 512, nil)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range Regions(size) {
		for _, off := range []int64{r.Off, r.end() - 1} {
			for _, b := range []byte{1, 0} {
				if _, err := f.WriteAt([]byte{b}, off); err != nil {
					t.Fatal(err)
				}
				want := Result{Blank: b == 0, NonZero: -1}
				if b != 0 {
					want.NonZero = off
				}
				if got, err := Probe(dev); err != nil || got != want {
					t.Errorf("byte %d at %d: Probe = %+v, %v; want %+v", b, off, got, err, want)
				}
			}
		}
	}
}

// TestRegions: the regions are sorted, disjoint, inside the device, readable with direct I/O (whole pages, or
// whole sectors up to the end), and none below the envelope.
func TestRegions(t *testing.T) {
	if r := Regions(minSize - 512); r != nil {
		t.Errorf("Regions below %d = %v, want nil", minSize, r)
	}
	for _, size := range []int64{minSize, 64*mib + 512, gib, gib + 3*512, 1 << 40} {
		rs := Regions(size)
		if len(rs) == 0 || rs[0].Off != 0 || rs[len(rs)-1].end() != size {
			t.Errorf("Regions(%d) = %v: want the first and last bytes covered", size, rs)
		}
		for _, r := range rs {
			if r.Off%page != 0 || r.Len%512 != 0 || r.end() != size && r.end()%page != 0 {
				t.Errorf("Regions(%d): %v is not in whole pages", size, r)
			}
		}
		for i := 1; i < len(rs); i++ {
			if rs[i].Off <= rs[i-1].end() {
				t.Errorf("Regions(%d) = %v: not sorted and disjoint", size, rs)
			}
		}
	}
}

// TestProbeFindsFirstNonZero: Probe reports the first non-zero byte where blkid looks, whichever reader finds
// it, and reads the whole of a device below the envelope (whose regions are unknown), so a byte anywhere on a
// small device counts while a byte outside the regions of a large one does not.
func TestProbeFindsFirstNonZero(t *testing.T) {
	requireLoop(t)
	const large, small = gib, 16 * mib
	regions := Regions(large)
	last := regions[len(regions)-1]
	tests := []struct {
		name   string
		size   int64
		writes []int64 // offsets of the non-zero bytes
		want   Result
	}{
		{"blank", large, nil, Result{Blank: true, NonZero: -1}},
		{"superblock", large, []int64{1024}, Result{NonZero: 1024}},
		{"two pieces, the second reader's first", large, []int64{readChunk + 7, 3 * readChunk}, Result{NonZero: readChunk + 7}},
		{"start and end", large, []int64{last.Off + 5, 4 << 20}, Result{NonZero: 4 << 20}},
		{"end only", large, []int64{large - 1}, Result{NonZero: large - 1}},
		{"outside the regions", large, []int64{100 * mib}, Result{Blank: true, NonZero: -1}},
		{"small blank", small, nil, Result{NonZero: -1}},
		{"small, data in the middle", small, []int64{7*mib + 3}, Result{NonZero: 7*mib + 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := loopDevice(t, tc.size, 512, func(file string) {
				f, err := os.OpenFile(file, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				for _, off := range tc.writes {
					if _, err := f.WriteAt([]byte{0x5a}, off); err != nil {
						t.Fatal(err)
					}
				}
			})
			if got, err := Probe(dev); err != nil || got != tc.want {
				t.Errorf("Probe = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(file); !errors.Is(err, ErrNotBlockDevice) {
		t.Errorf("Probe of a regular file: %v, want ErrNotBlockDevice", err)
	}
}

// TestMeasured: the proof is trusted only for the blkid and libblkid releases the read set was measured on.
func TestMeasured(t *testing.T) {
	for out, want := range map[string]bool{
		"blkid from util-linux 2.38.1  (libblkid 2.38.1, 04-Aug-2022)\n": true,
		"blkid from util-linux 2.39.3  (libblkid 2.39.3, 04-Dec-2023)":   false,
		"blkid from util-linux 2.38.1  (libblkid 2.40.2, 04-Jul-2024)":   false,
		"blkid from util-linux 2.38  (libblkid 2.38, 28-Mar-2022)":       false,
		"blkid from util-linux 2.38.1":                                   false,
		"":                                                               false,
		"BusyBox v1.36.1 (2023-06-10) multi-call binary.":                false,
	} {
		if got := Measured(out); got != want {
			t.Errorf("Measured(%q) = %v, want %v", out, got, want)
		}
	}
}
