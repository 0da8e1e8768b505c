package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/pkg/blkprobe"
	"github.com/diskforge/diskforge/pkg/loopdev"
)

// fakeMachine is a host with a mount table and block devices in memory, behaving as the kernel and the tools
// do where the node's rules depend on it: a filesystem mounts only from a device holding it, a device node
// bound onto a file makes the file that device, unmount takes the topmost mount, mkfs makes a filesystem of the
// device's size, blkid finds what was made. Paths are real (temporary directories, and empty files standing in
// for device nodes), and so is sysfs: a tree under the machine's directory that the node reads as it reads
// /sys (loop backing files, NVMe serials, device numbers). Nothing needs root.
type fakeMachine struct {
	t       *testing.T
	devDir  string
	sys     sysfsView
	boot    string
	version string // what blkid -V prints

	mu      sync.Mutex
	devices map[string]*fakeDevice // by node path
	table   []fakeMount
	nextID  int
	formats []string // devices mkfs ran on, in order
	// mkfsArgs are the arguments of each mkfs run (before the device), in order.
	mkfsArgs [][]string
	// xfsUnknown names the mkfs.xfs options (reflink, nrext64...) the fake's mkfs.xfs does not know.
	xfsUnknown []string
	// xfsProbes counts mkfsXFSKnows calls.
	xfsProbes int
	blkidRan  int
	// formatHook, when set, runs as mkfs starts on dev; an error fails mkfs (after the hook's writes).
	formatHook func(dev string) error
	// growHook and unmountHook, when set, run before growFS and unmount; an error fails the call.
	growHook    func(dev string) error
	unmountHook func(target string) error
	// diskseq numbers the devices as the kernel does, anew on every attach and loop bind.
	diskseq int
	// mountCalls are the options of each mount call, in order.
	mountCalls []fakeMountCall
}

// fakeMountCall is one mount as the node asked for it.
type fakeMountCall struct {
	target, fsType string
	opts           []string
}

// fakeDevice is a block device: its size, and what is on it.
type fakeDevice struct {
	name string
	node string
	rdev uint64
	size int64
	// fsType is what blkid finds ("" nothing); fsSize the filesystem's size.
	fsType string
	fsSize int64
	// data is the first non-zero byte where blkid looks, -1 for zeros.
	data int64
	// inProgress: the xfs superblock is still marked in progress, as an interrupted mkfs.xfs leaves it.
	inProgress bool
}

type fakeMount struct {
	info *mountinfo.Info
	// node is the device whose node is bound here (a published block volume), 0 for anything else.
	node uint64
}

const (
	fakeBlkidMeasured   = "blkid from util-linux 2.38.1  (libblkid 2.38.1, 04-Aug-2022)\n"
	fakeBlkidUnmeasured = "blkid from util-linux 2.41.1  (libblkid 2.41.1, 24-Jun-2025)\n"
	// devtmpfs is the filesystem device nodes live on: a bind mount of a node is a mount of it.
	devtmpfsMinor = 5
)

func newFakeMachine(t *testing.T) *fakeMachine {
	t.Helper()
	dir := t.TempDir()
	m := &fakeMachine{t: t, devDir: filepath.Join(dir, "dev"), boot: "boot-1", version: fakeBlkidMeasured,
		sys:     sysfsView{block: loopdev.Sysfs{Root: filepath.Join(dir, "sys", "block")}, devBlock: filepath.Join(dir, "sys", "dev", "block")},
		devices: map[string]*fakeDevice{}}
	for _, d := range []string{m.devDir, m.sys.block.Root, m.sys.devBlock} {
		must(t, os.MkdirAll(d, 0o755))
	}
	return m
}

// addDevice makes a block device: its node (an empty file), its sysfs directory and /sys/dev/block link.
func (m *fakeMachine) addDevice(name string, major, minor uint32, size int64) *fakeDevice {
	m.t.Helper()
	d := &fakeDevice{name: name, node: filepath.Join(m.devDir, name), rdev: unix.Mkdev(major, minor), size: size, data: -1}
	return m.register(d, filepath.Join(m.sys.block.Root, name))
}

// register makes d's sysfs directory sysDir (its dev file), its /sys/dev/block link and its node.
func (m *fakeMachine) register(d *fakeDevice, sysDir string) *fakeDevice {
	m.t.Helper()
	must(m.t, os.MkdirAll(sysDir, 0o755))
	must(m.t, os.WriteFile(filepath.Join(sysDir, "dev"), []byte(devID(d.rdev)+"\n"), 0o644))
	must(m.t, os.Symlink(sysDir, filepath.Join(m.sys.devBlock, devID(d.rdev))))
	must(m.t, os.WriteFile(d.node, nil, 0o600))
	m.rebind(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices[d.node] = d
	return d
}

// rebind gives d a new diskseq, as the kernel does when the device is attached or bound anew.
func (m *fakeMachine) rebind(d *fakeDevice) {
	m.t.Helper()
	m.mu.Lock()
	m.diskseq++
	seq := m.diskseq
	m.mu.Unlock()
	must(m.t, os.WriteFile(filepath.Join(m.sys.devBlock, devID(d.rdev), "diskseq"), []byte(fmt.Sprintf("%d\n", seq)), 0o644))
}

// noDiskseq makes d a device of a kernel older than diskseq (5.15).
func (m *fakeMachine) noDiskseq(d *fakeDevice) {
	m.t.Helper()
	must(m.t, os.Remove(filepath.Join(m.sys.devBlock, devID(d.rdev), "diskseq")))
}

// loopVolume is fakecloud's device of a volume: a loop device backed by <volume>.img.
func (m *fakeMachine) loopVolume(volumeID string, n uint32, size int64) *fakeDevice {
	d := m.addDevice(fmt.Sprintf("loop%d", n), 7, n, size)
	loopDir := filepath.Join(m.sys.block.Root, d.name, "loop")
	must(m.t, os.MkdirAll(loopDir, 0o755))
	must(m.t, os.WriteFile(filepath.Join(loopDir, "backing_file"), []byte("/var/lib/fakecloud/volumes/"+volumeID+".img\n"), 0o644))
	must(m.t, os.WriteFile(filepath.Join(loopDir, "autoclear"), []byte("0\n"), 0o644))
	return d
}

// nvmeVolume is an EBS volume on a Nitro instance: its serial, and udev's by-id link.
func (m *fakeMachine) nvmeVolume(volumeID string, n uint32, size int64) *fakeDevice {
	d := m.addDevice(fmt.Sprintf("nvme%dn1", n), 259, n, size)
	devDir := filepath.Join(m.sys.block.Root, d.name, "device")
	must(m.t, os.MkdirAll(devDir, 0o755))
	must(m.t, os.WriteFile(filepath.Join(devDir, "serial"), []byte(ebsSerial(volumeID)+"  \n"), 0o644))
	byID := filepath.Join(m.devDir, "disk", "by-id")
	must(m.t, os.MkdirAll(byID, 0o755))
	must(m.t, os.Symlink("../../"+d.name, filepath.Join(byID, ebsNVMePrefix+ebsSerial(volumeID))))
	return d
}

// xenDevice is an EBS volume on a Xen instance: /dev/xvd<letters>, nothing saying whose it is.
func (m *fakeMachine) xenDevice(letters string, size int64) *fakeDevice {
	minor := uint32(0)
	for _, c := range letters {
		minor = minor*26 + uint32(c-'a'+1)
	}
	return m.addDevice("xvd"+letters, 202, minor*16, size)
}

// mountTmpfs mounts a filesystem of no device on path, as a foreign mount.
func (m *fakeMachine) mountTmpfs(path string) {
	m.t.Helper()
	real, err := filepath.EvalSymlinks(path)
	must(m.t, err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.add(&mountinfo.Info{Major: 0, Minor: 77, Root: "/", Mountpoint: real, FSType: "tmpfs", Source: "tmpfs", Options: "rw"}, 0)
}

// ranMkfs and ranBlkid report the tools run so far.
func (m *fakeMachine) ranMkfs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.formats)
}

func (m *fakeMachine) ranMkfsArgs() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mkfsArgs)
}

// ranMounts reports the mount calls so far.
func (m *fakeMachine) ranMounts() []fakeMountCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mountCalls)
}

func (m *fakeMachine) ranBlkid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.blkidRan
}

// write changes a device's content as a test would with dd: data at off (-1: zeros again), or a signature.
func (m *fakeMachine) write(d *fakeDevice, fsType string, data int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.fsType, d.fsSize, d.data, d.inProgress = fsType, d.size, data, false
}

// unfinishedXFS leaves on d what mkfs.xfs killed half-way does: an xfs superblock marked in progress.
func (m *fakeMachine) unfinishedXFS(d *fakeDevice) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.fsType, d.fsSize, d.data, d.inProgress = FSXFS, d.size, 0, true
}

func (m *fakeMachine) resize(d *fakeDevice, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d.size = size
}

// add appends a mount; the caller holds mu.
func (m *fakeMachine) add(info *mountinfo.Info, node uint64) {
	m.nextID++
	info.ID = m.nextID
	m.table = append(m.table, fakeMount{info: info, node: node})
}

// topmost is the topmost mount on the real path, -1 when none; the caller holds mu.
func (m *fakeMachine) topmost(real string) int {
	for i := len(m.table) - 1; i >= 0; i-- {
		if m.table[i].info.Mountpoint == real {
			return i
		}
	}
	return -1
}

// resolve follows symlinks, as the kernel's path walk does; the caller may hold mu.
func resolve(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", &fs.PathError{Op: "stat", Path: path, Err: syscall.ENOENT}
	}
	return real, nil
}

// deviceAt is the block device path is (its node, or a file its node is bound onto); the caller holds mu.
func (m *fakeMachine) deviceAt(path string) (*fakeDevice, error) {
	real, err := resolve(path)
	if err != nil {
		return nil, err
	}
	if d := m.devices[real]; d != nil {
		return d, nil
	}
	if i := m.topmost(real); i >= 0 && m.table[i].node != 0 {
		for _, d := range m.devices {
			if d.rdev == m.table[i].node {
				return d, nil
			}
		}
	}
	return nil, nil
}

func (m *fakeMachine) mounts(filter mountinfo.FilterFunc) ([]*mountinfo.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*mountinfo.Info
	for _, fm := range m.table {
		info := *fm.info
		if filter != nil {
			skip, stop := filter(&info)
			if !skip {
				out = append(out, &info)
			}
			if stop {
				break
			}
			continue
		}
		out = append(out, &info)
	}
	return out, nil
}

// perMount are the options mountinfo lists per mount; the rest are the filesystem's.
var perMount = map[string]bool{"ro": true, "rw": true, "noexec": true, "nosuid": true, "nodev": true, "noatime": true, "relatime": true}

func (m *fakeMachine) mount(source, target, fsType string, opts []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mountCalls = append(m.mountCalls, fakeMountCall{target: target, fsType: fsType, opts: slices.Clone(opts)})
	real, err := resolve(target)
	if err != nil {
		return err
	}
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	options, vfs := []string{"rw"}, []string{}
	for _, o := range opts {
		switch {
		case o == "ro":
			options[0] = "ro"
		case o == "bind" || o == "defaults":
		case perMount[o]:
			options = append(options, o)
		default:
			vfs = append(vfs, o)
		}
	}
	info := &mountinfo.Info{Mountpoint: real, Options: strings.Join(options, ","), VFSOptions: strings.Join(vfs, ",")}
	if slices.Contains(opts, "bind") {
		src, err := resolve(source)
		if err != nil {
			return err
		}
		if d := m.devices[src]; d != nil {
			if st.IsDir() {
				return &fs.PathError{Op: "mount", Path: target, Err: syscall.ENOTDIR}
			}
			info.Minor, info.Root, info.FSType, info.Source = devtmpfsMinor, "/"+d.name, "devtmpfs", "udev"
			m.add(info, d.rdev)
			return nil
		}
		if i := m.topmost(src); i >= 0 {
			from := m.table[i]
			info.Major, info.Minor, info.Root, info.FSType, info.Source = from.info.Major, from.info.Minor, from.info.Root, from.info.FSType, from.info.Source
			// A bind shares its source's superblock, and with it the filesystem's options (SELinux labels too);
			// the kernel ignores filesystem options on a bind.
			info.VFSOptions = from.info.VFSOptions
			m.add(info, from.node)
			return nil
		}
		info.Minor, info.Root, info.FSType, info.Source = 99, src, "ext4", "/dev/root"
		m.add(info, 0)
		return nil
	}
	d, err := m.deviceAt(source)
	if err != nil {
		return err
	}
	if d == nil || d.fsType != fsType || d.inProgress {
		return &fs.PathError{Op: "mount", Path: source, Err: syscall.EINVAL} // wrong fs type, bad superblock
	}
	if !st.IsDir() {
		return &fs.PathError{Op: "mount", Path: target, Err: syscall.ENOTDIR}
	}
	info.Major, info.Minor, info.Root, info.FSType, info.Source = int(unix.Major(d.rdev)), int(unix.Minor(d.rdev)), "/", fsType, source
	m.add(info, 0)
	return nil
}

func (m *fakeMachine) unmount(target string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unmountHook != nil {
		if err := m.unmountHook(target); err != nil {
			return err
		}
	}
	real, err := resolve(target)
	if err != nil {
		return err
	}
	i := m.topmost(real)
	if i < 0 {
		return &fs.PathError{Op: "umount", Path: target, Err: syscall.EINVAL}
	}
	m.table = slices.Delete(m.table, i, i+1)
	return nil
}

func (m *fakeMachine) blockDevice(path string) (uint64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.deviceAt(path)
	if err != nil {
		return 0, false, err
	}
	if d != nil {
		return d.rdev, true, nil
	}
	_, err = os.Stat(path)
	return 0, false, err
}

// device is the device at path, or an error as opening a non-device would give.
func (m *fakeMachine) device(path string) (*fakeDevice, error) {
	d, err := m.deviceAt(path)
	if err == nil && d == nil {
		err = &fs.PathError{Op: "open", Path: path, Err: syscall.ENOTBLK}
	}
	return d, err
}

func (m *fakeMachine) deviceSize(path string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(path)
	if err != nil {
		return 0, err
	}
	return d.size, nil
}

func (m *fakeMachine) deviceCondition(_ context.Context, rdev uint64) (string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.devices {
		if d.rdev == rdev {
			return "", ""
		}
	}
	return "DeviceGone", fmt.Sprintf("block device %s is gone", devID(rdev))
}

func (m *fakeMachine) probe(dev string) (blkprobe.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(dev)
	if err != nil {
		return blkprobe.Result{}, err
	}
	nonZero := d.data
	if d.fsType != "" && nonZero < 0 {
		nonZero = 1024 // a superblock
	}
	return blkprobe.Result{Blank: nonZero < 0 && blkprobe.Regions(d.size) != nil, NonZero: nonZero}, nil
}

func (m *fakeMachine) diskFormat(dev string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blkidRan++
	d, err := m.device(dev)
	if err != nil {
		return "", err
	}
	return d.fsType, nil
}

func (m *fakeMachine) xfsInProgress(dev string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(dev)
	if err != nil {
		return false, err
	}
	return d.fsType == FSXFS && d.inProgress, nil
}

func (m *fakeMachine) blkidVersion() (string, error) { return m.version, nil }

func (m *fakeMachine) format(dev, fsType string, args []string) error {
	m.mu.Lock()
	m.formats = append(m.formats, dev)
	m.mkfsArgs = append(m.mkfsArgs, slices.Clone(args))
	hook := m.formatHook
	m.mu.Unlock()
	if hook != nil {
		if err := hook(dev); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(dev)
	if err != nil {
		return err
	}
	d.fsType, d.fsSize, d.data, d.inProgress = fsType, d.size, 0, false
	return nil
}

func (m *fakeMachine) mkfsXFSKnows(_, name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.xfsProbes++
	return !slices.Contains(m.xfsUnknown, name), nil
}

func (m *fakeMachine) repair(string) error { return nil }

func (m *fakeMachine) growFS(_ context.Context, fsType, dev, _ string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.growHook != nil {
		if err := m.growHook(dev); err != nil {
			return 0, err
		}
	}
	d, err := m.device(dev)
	if err != nil {
		return 0, err
	}
	if d.fsType != fsType {
		return 0, fmt.Errorf("%s holds %q, not %s", dev, d.fsType, fsType)
	}
	d.fsSize = d.size
	return d.fsSize, nil
}

func (m *fakeMachine) statfs(path string) (unix.Statfs_t, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	real, err := resolve(path)
	if err != nil {
		return unix.Statfs_t{}, err
	}
	if i := m.topmost(real); i >= 0 {
		for _, d := range m.devices {
			if d.rdev == mountDev(m.table[i].info) {
				blocks := uint64(d.fsSize / 4096)
				return unix.Statfs_t{Bsize: 4096, Blocks: blocks, Bfree: blocks, Bavail: blocks, Files: 1024, Ffree: 1000}, nil
			}
		}
	}
	var st unix.Statfs_t
	return st, unix.Statfs(real, &st)
}

func (m *fakeMachine) bootID() (string, error) { return m.boot, nil }

func (m *fakeMachine) sysfs() sysfsView { return m.sys }

// newFakeEnv is a node server on a fake machine, its state in a directory of the test's, its paths under
// the env's directory. A device is looked for once: a missing one is not waited for.
func newFakeEnv(t *testing.T, m *fakeMachine) *nodeEnv {
	t.Helper()
	return newFakeEnvWith(t, m, NodeOptions{})
}

// newFakeEnvWith is newFakeEnv with o's other options (LegacyXFS...).
func newFakeEnvWith(t *testing.T, m *fakeMachine, o NodeOptions) *nodeEnv {
	t.Helper()
	o.InstanceID, o.Zone, o.DevDir, o.DeviceWait, o.StateDir, o.host = "i-0fake", "zone-a", m.devDir, 1, t.TempDir(), m
	n, err := NewNodeServer(o)
	if err != nil {
		t.Fatal(err)
	}
	return &nodeEnv{t: t, node: n, dir: t.TempDir()}
}

// mountsAt lists the fake's mount table entries on path (as the kernel names it), bottom first.
func (m *fakeMachine) mountsAt(path string) []*mountinfo.Info {
	m.t.Helper()
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	must(m.t, err)
	infos, err := m.mounts(mountinfo.SingleEntryFilter(real))
	must(m.t, err)
	return infos
}

// partition makes partition n of d, with its sysfs entries as the kernel lays them out.
func (m *fakeMachine) partition(d *fakeDevice, n uint32) *fakeDevice {
	m.t.Helper()
	name := fmt.Sprintf("%s%d", d.name, n)
	p := &fakeDevice{name: name, node: filepath.Join(m.devDir, name), rdev: d.rdev + uint64(n), size: d.size / 2, data: -1}
	sysDir := filepath.Join(m.sys.block.Root, d.name, name)
	m.register(p, sysDir)
	must(m.t, os.WriteFile(filepath.Join(sysDir, "partition"), []byte(fmt.Sprintf("%d\n", n)), 0o644))
	return p
}

// alias makes name in the device directory a symlink to d's node, as udev's names for a device are.
func (m *fakeMachine) alias(name string, d *fakeDevice) {
	m.t.Helper()
	must(m.t, os.Symlink(d.name, filepath.Join(m.devDir, name)))
}
