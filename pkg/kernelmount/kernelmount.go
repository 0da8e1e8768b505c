// Package kernelmount mounts with mount(2) where mount(8) would add nothing but a process: a kernel filesystem
// on a block device (ext2/3/4, xfs) and a plain bind mount, with options the kernel takes as they are. mount(8)
// costs a stage 3–4 ms of exec, dynamic linking (libmount, libblkid, libselinux) and locale loading around a
// syscall of 1–2 ms. Everything else goes to the wrapped mount-utils Interface (mount(8)) as before: userspace
// options that mount(8) acts on or keeps in its utab (_netdev, nofail, x-*, loop, ...), SELinux contexts (which
// libmount translates), kernel flags the option table below does not know, sensitive options, remounts and
// propagation changes, other filesystems, and binds with flags other than ro.
package kernelmount

import (
	"fmt"
	"slices"
	"strings"

	mobymount "github.com/moby/sys/mount"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// Mounter is a mount-utils Interface that mounts directly what it can and hands the rest to the wrapped one.
type Mounter struct {
	mount.Interface
}

// New wraps fallback, which does everything but the mounts Direct accepts.
func New(fallback mount.Interface) *Mounter { return &Mounter{Interface: fallback} }

// Mount implements mount.Interface.
func (m *Mounter) Mount(source, target, fstype string, options []string) error {
	return m.MountSensitive(source, target, fstype, options, nil)
}

// MountSensitive implements mount.Interface. Mount-utils' SafeFormatAndMount mounts through it too.
func (m *Mounter) MountSensitive(source, target, fstype string, options, sensitiveOptions []string) error {
	if len(sensitiveOptions) > 0 || !Direct(fstype, options) {
		return m.Interface.MountSensitive(source, target, fstype, options, sensitiveOptions)
	}
	// mount(8) drops "defaults" (no flag at all); moby/sys/mount would pass it to the filesystem as data.
	opts := strings.Join(slices.DeleteFunc(slices.Clone(options), func(o string) bool { return o == "defaults" }), ",")
	klog.V(4).InfoS("Mounting with mount(2)", "source", source, "target", target, "fsType", fstype, "options", opts)
	if err := mobymount.Mount(source, target, fstype, opts); err != nil {
		return fmt.Errorf("mount %s on %s (type %q, options %q): %w", source, target, fstype, opts, err)
	}
	return nil
}

// blockFilesystems are the filesystems mounted directly: kernel filesystems on a block device, which need no
// mount helper.
var blockFilesystems = map[string]bool{"ext2": true, "ext3": true, "ext4": true, "xfs": true}

// kernelFlags are the options moby/sys/mount turns into mount(2) flags, as mount(8) does.
var kernelFlags = map[string]bool{
	"defaults": true, "ro": true, "rw": true, "suid": true, "nosuid": true, "dev": true, "nodev": true,
	"exec": true, "noexec": true, "sync": true, "async": true, "dirsync": true, "mand": true, "nomand": true,
	"atime": true, "noatime": true, "diratime": true, "nodiratime": true, "relatime": true, "norelatime": true,
	"strictatime": true, "nostrictatime": true,
}

// fallbackOptions are options mount(8) handles itself, or turns into flags that moby/sys/mount would pass on
// as filesystem data instead (libmount's optmap: the userspace options, the Linux flags missing from
// kernelFlags, and the SELinux contexts it translates), and the ones that are no plain mount.
var fallbackOptions = map[string]bool{
	// userspace: acted on or kept in utab by mount(8), unknown to the kernel
	"auto": true, "noauto": true, "user": true, "nouser": true, "users": true, "owner": true, "noowner": true,
	"group": true, "nogroup": true, "_netdev": true, "comment": true, "loop": true, "offset": true,
	"sizelimit": true, "encryption": true, "nofail": true, "uhelper": true, "helper": true,
	"hash_device": true, "root_hash": true, "hash_offset": true, "root_hash_file": true, "fec_device": true,
	"fec_offset": true, "fec_roots": true, "root_hash_sig": true,
	// flags mount(8) knows and moby/sys/mount does not
	"iversion": true, "noiversion": true, "lazytime": true, "nolazytime": true, "nosymfollow": true,
	"symfollow": true, "silent": true, "loud": true,
	// SELinux contexts
	"context": true, "fscontext": true, "defcontext": true, "rootcontext": true, "seclabel": true,
	// not a plain mount
	"remount": true, "move": true, "bind": true, "rbind": true, "private": true, "rprivate": true,
	"shared": true, "rshared": true, "slave": true, "rslave": true, "unbindable": true, "runbindable": true,
}

// Direct reports whether a mount of fstype with options is one mount(2) does exactly as mount(8) would: a
// block filesystem whose options are kernel flags or the filesystem's own (passed to it as data), or a bind
// (fstype empty) with no option but ro or rw.
func Direct(fstype string, options []string) bool {
	if slices.Contains(options, "bind") {
		if fstype != "" && fstype != "none" {
			return false
		}
		for _, o := range options {
			if o != "bind" && o != "ro" && o != "rw" && o != "defaults" {
				return false
			}
		}
		return true
	}
	if !blockFilesystems[fstype] {
		return false
	}
	for _, o := range options {
		name, _, _ := strings.Cut(o, "=")
		if name == "" || fallbackOptions[name] || strings.HasPrefix(name, "x-") || strings.HasPrefix(name, "X-") ||
			strings.HasPrefix(name, "verity.") || strings.ContainsAny(o, ",\x00") {
			return false
		}
		if kernelFlags[name] && name != o {
			return false // "ro=1" is no flag; mount(8) would refuse it too, but say so through mount(8)
		}
	}
	return true
}
