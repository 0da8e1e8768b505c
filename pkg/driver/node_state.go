package driver

// The node plugin remembers two things across its own restarts, as small files under its state directory
// (NodeOptions.StateDir, --state-dir: by default under the kubelet's plugin directory on the host, so that they
// outlive the plugin's container). Each file is named by a volume ID (checked before any file is touched) and
// holds key=value lines written in one write, the last one "end=": a file without it was torn by a crash and
// counts as none.
//
//	formatting/<volume>  "mkfs of this volume started on this device and has not finished". mke2fs and
//	                     mkfs.xfs write much before their superblock, so a stage killed (or failing) during
//	                     mkfs leaves data without a signature, which the node never formats otherwise. The
//	                     record is written and fsynced (file and directory) before mkfs starts, and removed,
//	                     the removal fsynced, once mkfs succeeded and before the filesystem is mounted: while
//	                     it exists, nothing but the unfinished mkfs can be on the device, and a stage that
//	                     finds it for the device it found formats again, whatever the device holds. A record
//	                     naming another device (the volume was attached under another name since) is not acted
//	                     on: data without a signature is refused, naming it, and a signature makes it void.
//	devices/<volume>     "in this boot, the volume is staged from this device (path, number)": written at
//	                     stage before the mount, for a device that carries no identity of its own (a Xen
//	                     /dev/xvdX found by the publish context's device name), removed at unstage. Calls
//	                     without a publish context (publish, unpublish, unstage, stats, expand, health) find
//	                     and recognise the device by it. A record of another boot is void: attachments get
//	                     device names anew. It is not fsynced: only a crash of the machine loses it, and that
//	                     is another boot.
//
// With no state directory (tests, embedders) the records live in memory and die with the process.

import (
	"bufio"
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
)

// Kinds of record: the subdirectories of the state directory.
const (
	recordFormatting = "formatting"
	recordDevice     = "devices"
)

// maxRecordSize bounds what is read of a record: they are a few lines.
const maxRecordSize = 4096

// nodeState is the node's records; see the top of this file.
type nodeState struct {
	dir string
	mu  sync.Mutex
	mem map[string]map[string]string // kind/volume → fields, when dir is ""
}

// newNodeState opens the records under dir, creating its subdirectories; "" keeps them in memory.
func newNodeState(dir string) (*nodeState, error) {
	s := &nodeState{dir: dir, mem: map[string]map[string]string{}}
	if dir == "" {
		return s, nil
	}
	for _, kind := range []string{recordFormatting, recordDevice} {
		if err := os.MkdirAll(filepath.Join(dir, kind), 0o700); err != nil {
			return nil, fmt.Errorf("node state directory: %w", err)
		}
	}
	return s, nil
}

// file is the record's path, for a volume ID of the cloud's shape only: nothing else names a file here.
func (s *nodeState) file(kind, volumeID string) (string, error) {
	if !volumeIDPattern.MatchString(volumeID) {
		return "", fmt.Errorf("%w: no record for %q: not a volume ID", errInvalidParameter, volumeID)
	}
	return filepath.Join(s.dir, kind, volumeID), nil
}

// read returns the record's fields; ok is false when there is none, or only a torn one.
func (s *nodeState) read(kind, volumeID string) (fields map[string]string, ok bool, err error) {
	path, err := s.file(kind, volumeID)
	if err != nil {
		return nil, false, err
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		f, ok := s.mem[kind+"/"+volumeID]
		return maps.Clone(f), ok, nil
	}
	f, err := os.Open(path)
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
		return nil, false, fmt.Errorf("read %s record of volume %s: %w", kind, volumeID, err)
	}
	// The last line is "end=": a record without it was cut short.
	if _, whole := fields["end"]; !whole {
		return nil, false, nil
	}
	delete(fields, "end")
	return fields, true, nil
}

// write replaces the record; durable fsyncs it and its directory before returning.
func (s *nodeState) write(kind, volumeID string, fields map[string]string, durable bool) error {
	path, err := s.file(kind, volumeID)
	if err != nil {
		return err
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.mem[kind+"/"+volumeID] = maps.Clone(fields)
		return nil
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		fmt.Fprintf(&b, "%s=%s\n", k, fields[k])
	}
	b.WriteString("end=\n")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(b.String())
	if err == nil && durable {
		err = f.Sync()
	}
	if err := errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		return s.syncDir(kind)
	}
	return nil
}

// remove deletes the record, if any; durable fsyncs the removal.
func (s *nodeState) remove(kind, volumeID string, durable bool) error {
	path, err := s.file(kind, volumeID)
	if err != nil {
		return err
	}
	if s.dir == "" {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.mem, kind+"/"+volumeID)
		return nil
	}
	err = os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if durable {
		return s.syncDir(kind)
	}
	return nil
}

func (s *nodeState) syncDir(kind string) error {
	d, err := os.Open(filepath.Join(s.dir, kind))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// recordPath names a record for messages.
func (s *nodeState) recordPath(kind, volumeID string) string {
	if s.dir == "" {
		return kind + "/" + volumeID + " (in memory)"
	}
	return filepath.Join(s.dir, kind, volumeID)
}

// unfinishedFormat is the device on which mkfs of the volume started and did not finish, "" when none did.
func (s *nodeState) unfinishedFormat(volumeID string) (string, error) {
	f, ok, err := s.read(recordFormatting, volumeID)
	if err != nil || !ok {
		return "", err
	}
	return f["device"], nil
}

// startFormat records, durably, that mkfs of the volume is starting on device.
func (s *nodeState) startFormat(volumeID, device string) error {
	return s.write(recordFormatting, volumeID, map[string]string{"device": device}, true)
}

// finishFormat removes the record of the volume's mkfs, durably: from now on the device may hold its data.
func (s *nodeState) finishFormat(volumeID string) error {
	return s.remove(recordFormatting, volumeID, true)
}

// stagedDevice is a device stage recorded for a volume: its node and number.
type stagedDevice struct {
	path string
	rdev uint64
}

// stagedDevice is the device recorded at stage for the volume in this boot; ok is false when there is none.
func (s *nodeState) stagedDevice(volumeID, boot string) (d stagedDevice, ok bool, err error) {
	f, ok, err := s.read(recordDevice, volumeID)
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
	return s.write(recordDevice, volumeID, map[string]string{"boot": boot, "path": d.path, "rdev": devID(d.rdev)}, false)
}

// forgetStagedDevice removes the volume's device record, if any.
func (s *nodeState) forgetStagedDevice(volumeID string) error {
	return s.remove(recordDevice, volumeID, false)
}
