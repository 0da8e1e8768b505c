package driver

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// The node formats a device only when it holds nothing: no filesystem or partition table (blkid -p finds
// none) and zeros wherever blkid looks. Data without a signature blkid knows (a raw block volume's, a snapshot
// of one) is never formatted; the one exception is the node's own mkfs that did not finish, which nodeState
// records (see node_state.go).

// existingFormat says what dev holds for a stage of the volume: the filesystem or partition table type blkid
// finds, "" for a device to format, errDeviceHasData for data without a signature. A fresh volume, the common
// case, is proven blank in-process (blkprobe: the bytes blkid would read are all zero), which saves a blkid run
// costing as much as the mkfs, when the installed blkid is one blkprobe was measured on; anything else is
// probed by blkid as before.
func (n *NodeServer) existingFormat(volumeID, dev string) (string, error) {
	unfinished, err := n.state.unfinishedFormat(volumeID)
	if err != nil {
		return "", err
	}
	if unfinished == dev {
		klog.InfoS("Formatting again: the last mkfs of the volume on this device did not finish", "volume", volumeID, "device", dev,
			"record", n.state.formatRecord(volumeID))
		return "", nil
	}
	probed, probeErr := n.host.probe(dev)
	if probeErr != nil {
		klog.V(4).InfoS("Reading the device where blkid looks failed, probing with blkid", "device", dev, "err", probeErr)
	}
	if probeErr == nil && probed.Blank && n.provenBlank {
		return "", nil
	}
	existing, err := n.host.diskFormat(dev)
	if err != nil {
		return "", err
	}
	if existing != "" {
		if unfinished != "" {
			// Recorded on a device of another name (the volume was attached anew since): the volume now holds a
			// filesystem or partition table, no longer the unfinished mkfs.
			klog.InfoS("Removing the record of an unfinished mkfs: the volume holds a signature now", "volume", volumeID,
				"device", dev, "recordedDevice", unfinished, "found", existing)
			if err := n.state.finishFormat(volumeID); err != nil {
				return "", err
			}
		}
		return existing, nil
	}
	// blkid knows nothing on the device: new (zeros where blkid looks) or data it does not recognise.
	if probeErr != nil {
		return "", fmt.Errorf("blkid finds nothing on %s (volume %s), and reading where it looks failed, so it is not formatted: %w",
			dev, volumeID, probeErr)
	}
	if probed.NonZero >= 0 {
		also := ""
		if unfinished != "" {
			also = fmt.Sprintf(" (%s is of an unfinished mkfs on %s, another device)", n.state.formatRecord(volumeID), unfinished)
		}
		return "", fmt.Errorf("%w: %s (volume %s) holds data (its first non-zero byte where blkid looks is at offset %d) but no filesystem or partition table blkid recognises%s; it is neither formatted nor mounted",
			errDeviceHasData, dev, volumeID, probed.NonZero, also)
	}
	return "", nil
}

// formatBlank runs mkfs on the volume's device, which existingFormat has found blank (or holding the node's
// unfinished mkfs), with the flags mount-utils gives mkfs (ext4: -F -m0; xfs: -f) after the volume's format
// options. The run is recorded first and the record removed after it (nodeState): a run that does not finish
// is redone by the next stage. Runs are bounded by the node's format tokens; a token comes back after
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
	case FSExt4:
		args = append(args, "-F", "-m0")
	case FSXFS:
		args = append(args, "-f")
	}
	if err := n.state.startFormat(volumeID, dev); err != nil {
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
