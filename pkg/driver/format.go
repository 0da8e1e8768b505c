package driver

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/blkprobe"
)

// diskFormat is what mount-utils' GetDiskFormat (blkid -p) reports of dev: "" for a blank device. A fresh
// volume, the common case, is proven blank in-process (blkprobe: the bytes blkid would read are all zero),
// which saves a blkid run costing as much as the mkfs; anything not proven blank is probed by blkid as before.
func (n *NodeServer) diskFormat(dev string) (string, error) {
	blank, err := blkprobe.Blank(dev)
	if err != nil {
		klog.V(4).InfoS("Quick blank check failed, probing with blkid", "device", dev, "err", err)
	}
	if blank {
		return "", nil
	}
	return n.mounter.GetDiskFormat(dev)
}

// formatBlank runs mkfs on a device the caller has just probed and found blank, with the flags mount-utils
// gives mkfs (ext4: -F -m0; xfs: -f) after the volume's format options. It lets a blank device be probed
// once: mount-utils' FormatAndMount would run blkid again, and on a cold device one blkid costs about as much
// as the mkfs. Runs are bounded by the node's format tokens; a token comes back after formatTokenTimeout even
// when mkfs hangs, as with mount-utils. mkfs is not tied to the caller's context: a run killed half-way would
// leave a device that is neither blank nor a filesystem.
func (n *NodeServer) formatBlank(dev, fsType string, formatOpts []string) error {
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
	args = append(args, dev)
	if out, err := n.mounter.Exec.Command("mkfs."+fsType, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.%s %s: %w: %s", fsType, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// formatAndMountProbed formats (when existing, the probe's answer, is blank) and mounts dev. A blank device
// to be mounted read-write is formatted here, probed once; anything else goes through mount-utils, which
// probes again, checks an existing filesystem (fsck) and refuses to format for a read-only mount.
func (n *NodeServer) formatAndMountProbed(dev, target, fsType, existing string, opts, formatOpts []string) error {
	if existing != "" || slices.Contains(opts, "ro") {
		return n.mounter.FormatAndMountSensitiveWithFormatOptions(dev, target, fsType, opts, nil, formatOpts)
	}
	if err := n.formatBlank(dev, fsType, formatOpts); err != nil {
		return err
	}
	return n.mounter.MountSensitive(dev, target, fsType, append(slices.Clone(opts), "defaults"), nil)
}
