package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// The node formats a device only when it holds nothing: no filesystem or partition table (blkid -p finds
// none) and zeros wherever blkid looks. Data without a signature blkid knows (a raw block volume's, a snapshot
// of one) is never formatted; the one exception is the node's own mkfs that did not finish on this very device
// in this boot, which nodeState records (see node_state.go), and only over what an interrupted mkfs leaves. A
// device holding a complete filesystem is never formatted.

// existingFormat says what dev holds for a stage of the volume: the filesystem or partition table type blkid
// finds, "" for a device to format, errDeviceHasData for data without a signature. A fresh volume, the common
// case, is proven blank in-process (blkprobe: the bytes blkid would read are all zero), which saves a blkid run
// costing as much as the mkfs, when the installed blkid is one blkprobe was measured on; anything else is
// probed by blkid as before.
func (n *NodeServer) existingFormat(volumeID, dev string) (string, error) {
	rec, recorded, err := n.state.unfinishedFormat(volumeID)
	if err != nil {
		return "", err
	}
	if recorded {
		now, err := n.formatTarget(dev)
		if err != nil {
			return "", err
		}
		if rec.matches(now) {
			return n.redoFormat(volumeID, dev)
		}
		// Made on another device, in another boot, or by a previous version: it can never match again.
		klog.InfoS("Removing a void record of an unfinished mkfs: the device is probed like any other", "volume", volumeID,
			"device", dev, "recordedDevice", rec.device, "sameBoot", rec.boot == now.boot, "sameFingerprint", rec.fingerprint == now.fingerprint)
		if err := n.state.finishFormat(volumeID); err != nil {
			return "", err
		}
	}
	probed, probeErr := n.host.probe(dev)
	if probeErr != nil {
		klog.V(4).InfoS("Reading the device where blkid looks failed, probing with blkid", "device", dev, "err", probeErr)
	}
	if probeErr == nil && probed.Blank && n.provenBlank {
		return "", nil
	}
	existing, err := n.host.diskFormat(dev)
	if err != nil || existing != "" {
		return existing, err
	}
	// blkid knows nothing on the device: new (zeros where blkid looks) or data it does not recognise.
	if probeErr != nil {
		return "", fmt.Errorf("blkid finds nothing on %s (volume %s), and reading where it looks failed, so it is not formatted: %w",
			dev, volumeID, probeErr)
	}
	if probed.NonZero >= 0 {
		also := ""
		if recorded {
			also = fmt.Sprintf(" (%s, void: it was made on %s, in another boot, on another device or by an earlier version)", n.state.recordName(volumeID), rec.device)
		}
		return "", fmt.Errorf("%w: %s (volume %s) holds data (its first non-zero byte where blkid looks is at offset %d) but no filesystem or partition table blkid recognises%s; it is neither formatted nor mounted",
			errDeviceHasData, dev, volumeID, probed.NonZero, also)
	}
	return "", nil
}

// redoFormat decides for a device holding the volume's own unfinished mkfs (its record matches): formatted
// again ("") when it holds what an interrupted mkfs leaves, nothing blkid recognises or an xfs superblock
// still marked in progress; anything else is a complete filesystem or table, kept, and the record removed.
func (n *NodeServer) redoFormat(volumeID, dev string) (string, error) {
	existing, err := n.host.diskFormat(dev)
	if err != nil {
		return "", err
	}
	unfinished := existing == ""
	if existing == FSXFS {
		if unfinished, err = n.host.xfsInProgress(dev); err != nil {
			return "", err
		}
	}
	if unfinished {
		klog.InfoS("Formatting again: the last mkfs of the volume on this device did not finish", "volume", volumeID, "device", dev,
			"found", existing, "record", n.state.recordName(volumeID))
		return "", nil
	}
	klog.InfoS("Removing the record of an unfinished mkfs: the device holds a complete signature", "volume", volumeID,
		"device", dev, "found", existing)
	if err := n.state.finishFormat(volumeID); err != nil {
		return "", err
	}
	return existing, nil
}

// formatTarget is the record a mkfs of dev would make now: its path, the boot, its fingerprint.
func (n *NodeServer) formatTarget(dev string) (formatRecord, error) {
	fp, err := n.deviceFingerprint(dev)
	if err != nil {
		return formatRecord{}, fmt.Errorf("identify %s: %w", dev, err)
	}
	return formatRecord{device: dev, boot: n.boot, fingerprint: fp}, nil
}

// deviceFingerprint digests what the kernel says of the block device at dev, to tell it from another device
// under the same name: its number and kernel name, its diskseq (new on every attach and loop bind; kernels
// from 5.15 have it), and what says whose it is: a loop device's backing file, an NVMe serial, or, for a
// device saying neither (Xen's xvdX), its size.
func (n *NodeServer) deviceFingerprint(dev string) (string, error) {
	rdev, isBlock, err := n.host.blockDevice(dev)
	if err != nil {
		return "", err
	}
	if !isBlock {
		return "", fmt.Errorf("%s is not a block device", dev)
	}
	name, err := n.sys.kernelName(rdev)
	if err != nil {
		return "", err
	}
	facts := []string{"dev=" + devID(rdev), "name=" + name}
	seq, err := n.sys.attr(rdev, "diskseq")
	switch {
	case err == nil:
		facts = append(facts, "diskseq="+seq)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	serial, hasSerial, err := n.sys.serial(name)
	if err != nil {
		return "", err
	}
	switch {
	case isLoopName(name):
		d, _, err := n.sys.block.Read(name)
		if err != nil {
			return "", err
		}
		facts = append(facts, "backing="+d.Backing)
	case hasSerial:
		facts = append(facts, "serial="+serial)
	default:
		size, err := n.host.deviceSize(dev)
		if err != nil {
			return "", err
		}
		facts = append(facts, "size="+strconv.FormatInt(size, 10))
	}
	sum := sha256.Sum256([]byte(strings.Join(facts, "\n")))
	return hex.EncodeToString(sum[:16]), nil
}

// formatBlank runs mkfs on the volume's device, which existingFormat has found blank (or holding the node's
// unfinished mkfs), with the flags mount-utils gives mkfs (ext3, ext4: -F -m0; xfs: -f) after the volume's
// format options. The run is recorded first and the record removed after it (nodeState): a run that does not
// finish is redone by the next stage. Runs are bounded by the node's format tokens; a token comes back after
// formatTokenTimeout even when mkfs hangs. mkfs is not tied to the caller's context: a run killed half-way
// would leave a device that is neither blank nor a filesystem (the volume's in-flight hold lasts until it
// ends, so a retry cannot start another).
func (n *NodeServer) formatBlank(volumeID, dev, fsType string, formatOpts []string) error {
	n.formatTokens <- struct{}{}
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer func() { <-n.formatTokens }()
		t := time.NewTimer(formatTokenTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}()
	args := slices.Clone(formatOpts)
	switch fsType {
	case FSExt3, FSExt4:
		args = append(args, "-F", "-m0")
	case FSXFS:
		args = append(args, "-f")
	}
	target, err := n.formatTarget(dev)
	if err != nil {
		return err
	}
	if err := n.state.startFormat(volumeID, target); err != nil {
		return fmt.Errorf("record the start of mkfs on %s (volume %s): %w", dev, volumeID, err)
	}
	klog.InfoS("Formatting blank device", "volume", volumeID, "device", dev, "fsType", fsType, "options", formatOpts)
	if err := n.host.format(dev, fsType, args); err != nil {
		// The record stays: whatever mkfs wrote, the next stage formats again.
		return err
	}
	if err := n.state.finishFormat(volumeID); err != nil {
		return fmt.Errorf("remove the record of mkfs on %s (volume %s): %w", dev, volumeID, err)
	}
	return nil
}

// mountStaged formats dev when existing (existingFormat's answer) is "", checks an existing filesystem before a
// read-write mount (fsck, as mount-utils does), and mounts it on the staging path.
func (n *NodeServer) mountStaged(volumeID, dev, staging, fsType, existing string, opts, formatOpts []string) error {
	readOnly := slices.Contains(opts, "ro")
	switch {
	case existing == "" && readOnly:
		return status.Errorf(codes.FailedPrecondition, "%s (volume %s) holds no filesystem and the volume is staged read-only: it cannot be formatted",
			dev, volumeID)
	case existing == "":
		if err := n.formatBlank(volumeID, dev, fsType, formatOpts); err != nil {
			return err
		}
	case !readOnly:
		if err := n.host.repair(dev); err != nil {
			return err
		}
	}
	return n.host.mount(dev, staging, fsType, append(slices.Clone(opts), "defaults"))
}

// legacyXFSFeatures are the mkfs.xfs features (option group and name) the EBS driver's --legacy-xfs turns off
// for kernels up to 5.4: inobtcount and bigtime need kernel 5.10, nrext64 5.19; reflink is off too, as there.
var legacyXFSFeatures = []struct{ flag, name string }{
	{"-m", "reflink"}, {"-m", "inobtcount"}, {"-m", "bigtime"}, {"-i", "nrext64"},
}

// legacyXFSOptions are the mkfs.xfs arguments turning off the legacyXFSFeatures the installed mkfs.xfs knows
// (an older one knows fewer, and refuses the option of a feature it never makes): "-m reflink=0,..." and
// "-i nrext64=0". mkfs.xfs takes several -m and -i, so they go beside a volume's inode size.
func legacyXFSOptions(h host) ([]string, error) {
	groups := map[string][]string{}
	var known, unknown []string
	for _, f := range legacyXFSFeatures {
		ok, err := h.mkfsXFSKnows(f.flag, f.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			unknown = append(unknown, f.name)
			continue
		}
		known = append(known, f.name)
		groups[f.flag] = append(groups[f.flag], f.name+"=0")
	}
	var args []string
	for _, flag := range []string{"-m", "-i"} {
		if len(groups[flag]) > 0 {
			args = append(args, flag, strings.Join(groups[flag], ","))
		}
	}
	klog.InfoS("Legacy xfs: volumes are formatted without the features older kernels cannot mount", "off", known,
		"unknownToMkfsXFS", unknown, "options", args)
	return args, nil
}
