package driver

// The node plugin remembers two things across its own restarts, under its state directory (NodeOptions.StateDir,
// --state-dir: by default under the kubelet's plugin directory on the host, so that they outlive the plugin's
// container). Both are keyed by volume ID, checked to have the cloud's shape before anything is touched.
//
//	formatting  "mkfs of this volume started on this device, in this boot, and has not finished". mke2fs and
//	            mkfs.xfs write much before their superblock (mkfs.xfs even a superblock marked in progress,
//	            which blkid takes for xfs and the kernel refuses to mount), so a stage killed, or failing,
//	            during mkfs leaves a device the node would otherwise never format again. Invariants:
//	            - the record is durable before mkfs starts, and its removal durable once mkfs succeeded,
//	              before the filesystem is mounted;
//	            - it names the device three ways: its path, the boot (host.bootID) and a fingerprint of what
//	              the kernel says of it (deviceFingerprint: number, name, diskseq where the kernel has it,
//	              loop backing file or NVMe serial, size for a device saying neither). A record is the
//	              volume's unfinished mkfs only when all three are those of the device found now; any other
//	              is void, removed when seen, and the device probed like any other. diskseq changes on every
//	              attach and loop bind, so a volume that went away and came back under the same name does
//	              not match;
//	            - even a matching record redoes mkfs only over what an interrupted mkfs leaves: nothing blkid
//	              recognises, or an xfs superblock still marked in progress. A device holding a complete
//	              filesystem (or a partition table) is never formatted; its record is removed;
//	            - unstage removes the record: whatever the device holds from then on is data;
//	            - a slot of the previous format ("<volume> <device>", no boot, no fingerprint) reads as void.
//
//	            The records are slots of one file of formatSlots sectors, written in place and fdatasynced: an
//	            overwrite of a block the file already has needs no journal commit, which a new file (and its
//	            directory entry) would, costing a stage several milliseconds on a busy disk where the slot
//	            costs a device flush. A slot is one sector, so a crash leaves it old or new, never torn. The
//	            file is read once, when the plugin starts; the slots in use are then kept in memory.
//
//	devices/<volume>  "in this boot, the volume is staged from this device (path, number)": written at stage
//	            before the mount, for a device that carries no identity of its own (a Xen /dev/xvdX found by
//	            the publish context's device name), removed at unstage. Calls without a publish context
//	            (publish, unpublish, unstage, stats, expand, health) find and recognise the device by it. A
//	            record of another boot is void: attachments get device names anew. One small file a volume,
//	            key=value lines ending with "end=" (one without it was cut short and counts as none), not
//	            fsynced: only a crash of the machine loses it, and that is another boot.
//
//	staged/<volume>  "in this boot, the volume is staged here, for this claim" (the PVC's namespace and name from
//	            the volume context, empty when it does not say): written when a stage succeeds, removed at
//	            unstage, in the format of the device records. The metrics collector (node_metrics.go) lists the
//	            volumes it reports, and their labels, from these records, so that a restart of the plugin loses
//	            neither.
//
// With no state directory (tests, embedders) the records live in memory and die with the process.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

const (
	// formatFile holds the formatting records; deviceDir the device records, stagedDir the staged records.
	formatFile = "formatting"
	deviceDir  = "devices"
	stagedDir  = "staged"
	// formatSlots is how many unfinished formats can be recorded at once, each in a sector of formatFile.
	formatSlots = 128
	slotSize    = 512
	// maxRecordSize bounds what is read of a device record: a few lines.
	maxRecordSize = 4096
)

// nodeState is the node's records; see the top of this file.
type nodeState struct {
	dir string
	mu  sync.Mutex
	// formats is the slot of each volume's unfinished format, and its record.
	formats map[string]formatSlot
	// used marks the slots in use (or being written).
	used [formatSlots]bool
	// file is formatFile, nil without a state directory.
	file *os.File
	// memory holds the device and staged records, by kind and volume, when there is no state directory.
	memory map[string]map[string]map[string]string
}

type formatSlot struct {
	index  int
	record formatRecord
}

// formatRecord is the device an unfinished mkfs ran on: its path, the boot, and its fingerprint
// (deviceFingerprint). A record of the previous slot format has no boot and no fingerprint.
type formatRecord struct {
	device, boot, fingerprint string
}

// matches reports whether the record names the device found now: same path, same boot, same fingerprint.
func (r formatRecord) matches(now formatRecord) bool {
	return r.boot != "" && r.fingerprint != "" && r == now
}

// newNodeState opens the records under dir, creating what is missing; "" keeps them in memory.
func newNodeState(dir string) (*nodeState, error) {
	s := &nodeState{dir: dir, formats: map[string]formatSlot{}, memory: map[string]map[string]map[string]string{}}
	if dir == "" {
		return s, nil
	}
	for _, kind := range []string{deviceDir, stagedDir} {
		if err := os.MkdirAll(filepath.Join(dir, kind), 0o700); err != nil {
			return nil, fmt.Errorf("node state directory: %w", err)
		}
	}
	if err := s.openFormats(filepath.Join(dir, formatFile)); err != nil {
		return nil, fmt.Errorf("node state: %w", err)
	}
	return s, nil
}

// openFormats opens the formatting records, making the file (all slots free, fsynced with its directory) when
// it is missing or short, and reads the slots in use.
func (s *nodeState) openFormats(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	s.file = f
	raw := make([]byte, formatSlots*slotSize)
	n, err := f.ReadAt(raw, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if n < len(raw) {
		// Made whole once (zeros are free slots), so that a slot's write never changes the file's size.
		if _, err := f.WriteAt(raw[n:], int64(n)); err != nil {
			return fmt.Errorf("extend %s: %w", path, err)
		}
		if err := errors.Join(f.Sync(), syncDir(filepath.Dir(path))); err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	for i := range formatSlots {
		slot := raw[i*slotSize : (i+1)*slotSize]
		if n < (i+1)*slotSize || slot[0] == 0 {
			continue
		}
		volumeID, rec, ok := parseFormatSlot(slot)
		if !ok {
			klog.InfoS("Ignoring a malformed record of an unfinished mkfs", "file", path, "slot", i)
			continue
		}
		s.formats[volumeID] = formatSlot{index: i, record: rec}
		s.used[i] = true
	}
	return nil
}

// formatSlotVersion starts a slot of the current format: "2 <volume> <device> <boot> <fingerprint>\n", then
// zeros. A slot of the previous format, "<volume> <device>\n", starts with the volume ID.
const formatSlotVersion = "2"

func formatSlotText(volumeID string, rec formatRecord) ([]byte, error) {
	fields := []string{formatSlotVersion, volumeID, rec.device, rec.boot, rec.fingerprint}
	text := strings.Join(fields, " ") + "\n"
	for _, f := range fields {
		if f == "" || strings.ContainsAny(f, " \n\x00") {
			return nil, fmt.Errorf("device %q (boot %q, fingerprint %q) cannot be recorded", rec.device, rec.boot, rec.fingerprint)
		}
	}
	if len(text) > slotSize {
		return nil, fmt.Errorf("device %q cannot be recorded: the record exceeds %d bytes", rec.device, slotSize)
	}
	slot := make([]byte, slotSize)
	copy(slot, text)
	return slot, nil
}

// parseFormatSlot reads a slot in use; one of the previous format gives a record without boot and fingerprint,
// which matches no device.
func parseFormatSlot(slot []byte) (volumeID string, rec formatRecord, ok bool) {
	line, _, found := bytes.Cut(slot, []byte("\n"))
	fields := strings.Fields(string(line))
	switch {
	case !found:
		return "", formatRecord{}, false
	case len(fields) == 5 && fields[0] == formatSlotVersion:
		volumeID, rec = fields[1], formatRecord{device: fields[2], boot: fields[3], fingerprint: fields[4]}
	case len(fields) == 2:
		volumeID, rec = fields[0], formatRecord{device: fields[1]}
	default:
		return "", formatRecord{}, false
	}
	return volumeID, rec, volumeIDPattern.MatchString(volumeID)
}

// checkVolume refuses a name that is not a volume ID: nothing else names a record.
func checkVolume(volumeID string) error {
	if !volumeIDPattern.MatchString(volumeID) {
		return fmt.Errorf("%w: no record for %q: not a volume ID", errInvalidParameter, volumeID)
	}
	return nil
}

// unfinishedFormat is the record of the volume's mkfs that started and did not finish; ok is false when none.
func (s *nodeState) unfinishedFormat(volumeID string) (rec formatRecord, ok bool, err error) {
	if err := checkVolume(volumeID); err != nil {
		return formatRecord{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := s.formats[volumeID]
	return slot.record, ok && slot.record.device != "", nil
}

// startFormat records, durably, that mkfs of the volume is starting on the device rec names.
func (s *nodeState) startFormat(volumeID string, rec formatRecord) error {
	if err := checkVolume(volumeID); err != nil {
		return err
	}
	text, err := formatSlotText(volumeID, rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	slot, ok := s.formats[volumeID]
	if !ok {
		slot.index = slices.Index(s.used[:], false)
		if slot.index < 0 {
			s.mu.Unlock()
			return fmt.Errorf("%d unfinished mkfs runs are recorded already (%s)", formatSlots, s.dir)
		}
		s.used[slot.index] = true
	}
	slot.record = formatRecord{}
	s.formats[volumeID] = slot // no device until the record is durable
	s.mu.Unlock()
	if err := s.writeSlot(slot.index, text); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.formats[volumeID] = formatSlot{index: slot.index, record: rec}
	return nil
}

// finishFormat removes the record of the volume's mkfs, durably: from now on the device may hold its data.
func (s *nodeState) finishFormat(volumeID string) error {
	if err := checkVolume(volumeID); err != nil {
		return err
	}
	s.mu.Lock()
	slot, ok := s.formats[volumeID]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if err := s.writeSlot(slot.index, make([]byte, slotSize)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.formats, volumeID)
	s.used[slot.index] = false
	return nil
}

// writeSlot writes a slot in place and waits for it to reach the disk.
func (s *nodeState) writeSlot(index int, slot []byte) error {
	if s.file == nil {
		return nil
	}
	if _, err := s.file.WriteAt(slot, int64(index*slotSize)); err != nil {
		return fmt.Errorf("write %s: %w", s.file.Name(), err)
	}
	if err := unix.Fdatasync(int(s.file.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", s.file.Name(), err)
	}
	return nil
}

// recordName names the volume's format record for messages.
func (s *nodeState) recordName(volumeID string) string {
	if s.dir == "" {
		return "the in-memory record of volume " + volumeID
	}
	return fmt.Sprintf("the record of volume %s in %s", volumeID, filepath.Join(s.dir, formatFile))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// stagedDevice is a device stage recorded for a volume: its node and number.
type stagedDevice struct {
	path string
	rdev uint64
}

// stagedDevice is the device recorded at stage for the volume in this boot; ok is false when there is none.
func (s *nodeState) stagedDevice(volumeID, boot string) (d stagedDevice, ok bool, err error) {
	f, ok, err := s.readDevice(volumeID)
	if err != nil || !ok || f["boot"] != boot || boot == "" {
		return stagedDevice{}, false, err
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(f["rdev"], "%d:%d", &major, &minor); err != nil || f["path"] == "" {
		return stagedDevice{}, false, nil
	}
	return stagedDevice{path: f["path"], rdev: unix.Mkdev(major, minor)}, true, nil
}

// recordStagedDevice records, for this boot, that the volume is staged from d.
func (s *nodeState) recordStagedDevice(volumeID, boot string, d stagedDevice) error {
	return s.writeRecord(deviceDir, volumeID, map[string]string{"boot": boot, "path": d.path, "rdev": devID(d.rdev)})
}

// forgetStagedDevice removes the volume's device record, if any.
func (s *nodeState) forgetStagedDevice(volumeID string) error {
	return s.removeRecord(deviceDir, volumeID)
}

// stagedVolume is a volume recorded as staged on this node, and the claim it was provisioned for (empty
// when the volume context did not say: a volume provisioned before the driver passed it on, or by hand).
type stagedVolume struct {
	volumeID              string
	pvcNamespace, pvcName string
}

// recordStaged records, for this boot, that the volume is staged here, for its claim.
func (s *nodeState) recordStaged(boot string, v stagedVolume) error {
	return s.writeRecord(stagedDir, v.volumeID, map[string]string{"boot": boot, "pvcNamespace": v.pvcNamespace, "pvcName": v.pvcName})
}

// forgetStaged removes the volume's staged record, if any.
func (s *nodeState) forgetStaged(volumeID string) error { return s.removeRecord(stagedDir, volumeID) }

// staged lists the volumes recorded as staged in this boot, by volume ID; records of another boot are void.
func (s *nodeState) staged(boot string) ([]stagedVolume, error) {
	ids, err := s.recordIDs(stagedDir)
	if err != nil {
		return nil, err
	}
	var list []stagedVolume
	for _, id := range ids {
		f, ok, err := s.readRecord(stagedDir, id)
		if err != nil {
			return list, err
		}
		if ok && boot != "" && f["boot"] == boot {
			list = append(list, stagedVolume{volumeID: id, pvcNamespace: f["pvcNamespace"], pvcName: f["pvcName"]})
		}
	}
	return list, nil
}

// writeRecord writes the volume's record of a kind (a directory under the state directory): key=value lines
// ending with "end=", so that a record cut short reads as none.
func (s *nodeState) writeRecord(kind, volumeID string, fields map[string]string) error {
	if err := checkVolume(volumeID); err != nil {
		return err
	}
	for k, v := range fields {
		if strings.ContainsAny(k+v, "\n\x00") || strings.Contains(k, "=") {
			return fmt.Errorf("%s record of volume %s: %q=%q cannot be recorded", kind, volumeID, k, v)
		}
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.memory[kind] == nil {
			s.memory[kind] = map[string]map[string]string{}
		}
		s.memory[kind][volumeID] = maps.Clone(fields)
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		fmt.Fprintf(&b, "%s=%s\n", k, fields[k])
	}
	b.WriteString("end=\n")
	path := filepath.Join(s.dir, kind, volumeID)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// removeRecord removes the volume's record of a kind, if any.
func (s *nodeState) removeRecord(kind, volumeID string) error {
	if err := checkVolume(volumeID); err != nil {
		return err
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.memory[kind], volumeID)
		return nil
	}
	if err := os.Remove(filepath.Join(s.dir, kind, volumeID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// recordIDs lists the volumes with a record of a kind, sorted; names that are not volume IDs are skipped.
func (s *nodeState) recordIDs(kind string) ([]string, error) {
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Sorted(maps.Keys(s.memory[kind])), nil
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, kind))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if volumeIDPattern.MatchString(e.Name()) && e.Type().IsRegular() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// readDevice returns the volume's device record; ok is false when there is none, or only a cut one.
func (s *nodeState) readDevice(volumeID string) (fields map[string]string, ok bool, err error) {
	return s.readRecord(deviceDir, volumeID)
}

// readRecord returns the volume's record of a kind; ok is false when there is none, or only a cut one.
func (s *nodeState) readRecord(kind, volumeID string) (fields map[string]string, ok bool, err error) {
	if err := checkVolume(volumeID); err != nil {
		return nil, false, err
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		f, ok := s.memory[kind][volumeID]
		return maps.Clone(f), ok, nil
	}
	f, err := os.Open(filepath.Join(s.dir, kind, volumeID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fields = map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, maxRecordSize))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), "=")
		if !found {
			return nil, false, nil
		}
		fields[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read the %s record of volume %s: %w", kind, volumeID, err)
	}
	if _, whole := fields["end"]; !whole {
		return nil, false, nil
	}
	delete(fields, "end")
	return fields, true, nil
}
