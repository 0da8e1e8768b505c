package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
	"k8s.io/utils/exec"

	"github.com/diskforge/diskforge/pkg/blkprobe"
	"github.com/diskforge/diskforge/pkg/kernelmount"
	"github.com/diskforge/diskforge/pkg/loopdev"
	"github.com/diskforge/diskforge/pkg/topology"
)

// Defaults of NodeOptions.
const (
	DefaultDevDir              = "/dev"
	DefaultMaxConcurrentFormat = 2
	DefaultDeviceWait          = 30 * time.Second
	// DefaultStateDir is under the kubelet's directory for this driver on the host, which the node plugin's
	// pod mounts at the same path: its records outlive the container.
	DefaultStateDir = "/var/lib/kubelet/plugins/disk.csi.diskforge.io/state"
)

// formatTokenTimeout is how long one mkfs may hold its concurrency token. Another mkfs may then start (the
// first one still runs to its end), so a hung mkfs cannot block every other stage for good.
const formatTokenTimeout = 5 * time.Minute

// NodeOptions configure the node service.
type NodeOptions struct {
	// InstanceID is the node's ID for the CO; ControllerPublishVolume attaches to it.
	InstanceID string
	// Zone is reported as the node's topology.
	Zone string
	// MaxVolumesPerNode is the instance's attachment limit; 0 means the CO decides.
	MaxVolumesPerNode int64
	// VolumeLimit, when set, answers NodeGetInfo's limit on each call instead of MaxVolumesPerNode, so that the
	// limit follows what the instance holds.
	VolumeLimit VolumeLimiter
	// DevDir is where device nodes are looked up and, for loop devices the container's /dev lacks, created.
	DevDir string
	// Sysfs finds loop devices and says what block devices are; the zero value reads /sys/block, and the
	// device numbers of <Root>/../dev/block (/sys/dev/block).
	Sysfs loopdev.Sysfs
	// MaxConcurrentFormat bounds parallel mkfs runs (mkfs of a large volume can take much memory).
	MaxConcurrentFormat int
	// DeviceWait bounds the wait for an attached volume's device to appear; the request's deadline bounds it too.
	DeviceWait time.Duration
	// Mounter mounts, and runs the filesystem tools and blkid with its Exec; nil means mount(2) where it
	// serves, mount(8) elsewhere, and the host's tools.
	Mounter *mount.SafeFormatAndMount
	// Devices finds a volume's device; nil means loop devices backed by <volumeID>.img, then EBS NVMe links,
	// then the publish context's device name on Xen instances.
	Devices DeviceFinder
	// StateDir keeps what the node must remember across restarts of the plugin (see node_state.go); "" keeps
	// it in memory only, for tests. cmd/driver sets DefaultStateDir unless told otherwise.
	StateDir string
	// LegacyXFS formats xfs without the features kernels before 5.x cannot mount (the EBS driver's
	// --legacy-xfs): reflink, bigtime, inobtcount and nrext64, those the installed mkfs.xfs knows.
	LegacyXFS bool

	// host is the machine; nil means the real one (tests set a fake).
	host host
}

// NodeServer stages, publishes, grows and reports volumes attached to this node.
type NodeServer struct {
	csi.UnimplementedNodeServer
	opts     NodeOptions
	host     host
	sys      sysfsView
	devices  DeviceFinder
	state    *nodeState
	inFlight *inFlight
	// boot is the host's boot ID, read at start: records of another boot are void.
	boot string
	// formatTokens bound the mkfs runs of formatBlank.
	formatTokens chan struct{}
	// provenBlank: blkprobe's proof that a device is blank holds for the installed blkid, so a device it
	// proves blank is formatted without asking blkid.
	provenBlank bool
	// legacyXFS are the mkfs.xfs arguments LegacyXFS adds, probed at start.
	legacyXFS []string
}

// NewNodeServer serves the node RPCs of the instance o describes.
func NewNodeServer(o NodeOptions) (*NodeServer, error) {
	if o.InstanceID == "" || o.Zone == "" {
		return nil, fmt.Errorf("node: instance ID and zone are required (got %q, %q)", o.InstanceID, o.Zone)
	}
	if o.MaxVolumesPerNode < 0 {
		return nil, fmt.Errorf("node: max volumes per node must not be negative, got %d", o.MaxVolumesPerNode)
	}
	if o.DevDir == "" {
		o.DevDir = DefaultDevDir
	}
	if o.MaxConcurrentFormat <= 0 {
		o.MaxConcurrentFormat = DefaultMaxConcurrentFormat
	}
	if o.DeviceWait <= 0 {
		o.DeviceWait = DefaultDeviceWait
	}
	h := o.host
	if h == nil {
		m := o.Mounter
		if m == nil {
			// Not through systemd-run: a kernel filesystem needs no scope to outlive the plugin, and probing for
			// systemd costs every first mount a process spawn.
			// Block filesystems and plain binds by mount(2): mount(8) would add a process to every stage and publish.
			m = mount.NewSafeFormatAndMount(kernelmount.New(mount.NewWithoutSystemd("")), exec.New())
		}
		h = &realHost{mounter: m, sys: newSysfsView(o.Sysfs), devDir: o.DevDir}
	}
	sys := h.sysfs()
	state, err := newNodeState(o.StateDir)
	if err != nil {
		return nil, err
	}
	boot, err := h.bootID()
	if err != nil {
		return nil, fmt.Errorf("node: boot ID: %w", err)
	}
	devices := o.Devices
	if devices == nil {
		devices = &deviceFinder{devDir: o.DevDir, sys: sys, wait: o.DeviceWait, host: h, state: state, boot: boot}
	}
	n := &NodeServer{opts: o, host: h, sys: sys, devices: devices, state: state, inFlight: newInFlight(nil), boot: boot,
		formatTokens: make(chan struct{}, o.MaxConcurrentFormat)}
	n.provenBlank = provenBlankHolds(h)
	if o.LegacyXFS {
		if n.legacyXFS, err = legacyXFSOptions(h); err != nil {
			return nil, fmt.Errorf("node: legacy xfs: %w", err)
		}
	}
	return n, nil
}

// provenBlankHolds checks the installed blkid against the releases blkprobe's read set was measured on: only
// for those does a device blkprobe proves blank need no blkid run.
func provenBlankHolds(h host) bool {
	out, err := h.blkidVersion()
	version, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if err == nil && blkprobe.Measured(out) {
		klog.InfoS("Blank devices are proven blank in-process: the installed blkid is a release blkprobe was measured on",
			"blkid", version)
		return true
	}
	klog.InfoS("Every device is probed with blkid before it is formatted: the installed blkid is not a release blkprobe was measured on",
		"blkid", version, "err", err, "measured", blkprobe.MeasuredVersions())
	return false
}

// VolumeLimiter tells how many volumes the node can take now; it never fails (it answers its last good count).
type VolumeLimiter interface {
	MaxVolumes(context.Context) int64
}

// NodeGetInfo computes the volume limit on each call: kubelet calls it every nodeAllocatableUpdatePeriodSeconds
// of the CSIDriver (and after an attach failed with ResourceExhausted) and updates the CSINode's count.
func (n *NodeServer) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	limit := n.opts.MaxVolumesPerNode
	if n.opts.VolumeLimit != nil {
		limit = n.opts.VolumeLimit.MaxVolumes(ctx)
	}
	return &csi.NodeGetInfoResponse{
		NodeId:             n.opts.InstanceID,
		MaxVolumesPerNode:  limit,
		AccessibleTopology: &csi.Topology{Segments: topology.Segments(n.opts.Zone)},
	}, nil
}

// NodeGetCapabilities: spec v1.13 removed VOLUME_CONDITION; volume health is served by NodeGetVolumeHealth.
func (n *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// lock holds the volume and the paths of one operation; an operation on any of them already in progress makes
// this one retry later. Holding paths too means two volumes can never race onto one path.
func (n *NodeServer) lock(ctx context.Context, volumeID string, paths ...string) (func(), error) {
	keys := []string{"volume/" + volumeID}
	for _, p := range paths {
		if p != "" {
			keys = append(keys, "path/"+p)
		}
	}
	return n.inFlight.holdAll(ctx, fmt.Sprintf("volume %s or its paths %q", volumeID, paths), keys...)
}

// volumeDevice is the volume's device as stage found it, when it is attached now (no waiting): its node and
// number. A volume without one is not staged on this node; notHere is the error to answer with then.
func (n *NodeServer) volumeDevice(volumeID string, notHere error) (dev string, rdev uint64, err error) {
	dev, err = n.devices.Lookup(volumeID)
	if err != nil {
		return "", 0, err
	}
	if dev == "" {
		return "", 0, fmt.Errorf("%w: volume %s has no device on this node", notHere, volumeID)
	}
	rdev, isBlock, err := n.host.blockDevice(dev)
	if err != nil {
		return "", 0, err
	}
	if !isBlock {
		return "", 0, fmt.Errorf("%w: %s is not a block device", notHere, dev)
	}
	return dev, rdev, nil
}

// owns is the test for volumeMountAt: a device that is or was the volume's.
func (n *NodeServer) owns(volumeID string) func(rdev uint64) (bool, error) {
	return func(rdev uint64) (bool, error) { return n.devices.Owns(volumeID, rdev) }
}

// Node-side error conditions, returned wrapped by helpers and turned into codes by codeFor.
var (
	// errDeviceNotFound: the attached volume's device did not appear in time.
	errDeviceNotFound = errors.New("device of the volume not found")
	// errDeviceHasData: the device holds a filesystem of another type or a partition table; it is never formatted.
	errDeviceHasData = errors.New("device holds other data")
	// errPathInUse: the path is mounted from another device, or with incompatible options.
	errPathInUse = errors.New("path already in use")
	// errNotStaged: publish found no staged filesystem at the staging path.
	errNotStaged = errors.New("volume is not staged")
	// errVolumeNotAtPath: the path does not hold the volume (missing, not mounted, another device's mount).
	errVolumeNotAtPath = errors.New("volume not found at path")
	// errStagedAsFilesystem: a block publish of a volume staged with a filesystem.
	errStagedAsFilesystem = errors.New("volume is staged with a filesystem")
	// errSELinuxLabels: a publish asks for other SELinux labels than the staged filesystem has.
	errSELinuxLabels = errors.New("SELinux labels differ from the staged filesystem's")
)

// checkVolumeCapability validates one capability the way the controller does, and its mount flags, and returns
// the filesystem it names ("" when it names none, and for block).
func checkVolumeCapability(c *csi.VolumeCapability, readOnly bool) (fsType string, block bool, err error) {
	if c == nil {
		return "", false, status.Error(codes.InvalidArgument, "volume capability is required")
	}
	needs, err := checkCapabilities([]*csi.VolumeCapability{c})
	if err != nil {
		return "", false, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := checkMountFlags(c.GetMount().GetMountFlags(), readOnly); err != nil {
		return "", false, err
	}
	return needs.fsType, needs.block, nil
}

// stageFilesystem is the filesystem a volume is formatted with: the capability's, else the one CreateVolume
// recorded in the volume context from the StorageClass, else the default.
func stageFilesystem(capability string, volumeContext map[string]string) (string, error) {
	fs := capability
	if fs == "" {
		fs = volumeContext[ParamFSType]
	}
	switch {
	case fs == "":
		return DefaultFS, nil
	case supportedFS(fs):
		return fs, nil
	}
	return "", status.Errorf(codes.InvalidArgument, "volume context names filesystem %q (%s)", fs, fsTypes)
}
