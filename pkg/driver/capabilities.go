package driver

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// accessModes the driver supports, and what they need of a volume.
var singleNodeModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
}

// capabilityNeeds is what a set of capabilities asks of a volume.
type capabilityNeeds struct {
	block bool
	// multiNode: the volume is attached to several nodes at once (io1/io2 Multi-Attach, block only).
	multiNode bool
	fsType    string
}

// checkCapabilities refuses capabilities the driver cannot honour and reports what the rest need.
func checkCapabilities(caps []*csi.VolumeCapability) (capabilityNeeds, error) {
	var n capabilityNeeds
	if len(caps) == 0 {
		return n, fmt.Errorf("volume capabilities are required")
	}
	for _, c := range caps {
		mode := c.GetAccessMode().GetMode()
		switch {
		case c.GetAccessMode() == nil:
			return n, fmt.Errorf("volume capability has no access mode")
		case mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
			n.multiNode = true
		case !singleNodeModes[mode]:
			return n, fmt.Errorf("access mode %s is not supported", mode)
		}
		switch at := c.GetAccessType().(type) {
		case *csi.VolumeCapability_Block:
			n.block = true
		case *csi.VolumeCapability_Mount:
			fs := at.Mount.GetFsType()
			if fs != "" && !supportedFS(fs) {
				return n, fmt.Errorf("filesystem %q is not supported (%s)", fs, fsTypes)
			}
			if fs != "" {
				n.fsType = fs
			}
		default:
			return n, fmt.Errorf("volume capability needs an access type, block or mount")
		}
	}
	if n.block && hasMount(caps) {
		// One volume cannot be both a raw device and a filesystem: formatting it for the one breaks the other.
		return n, fmt.Errorf("volume capabilities mix block and mount access: a volume is one or the other")
	}
	if n.multiNode && hasMount(caps) {
		return n, fmt.Errorf("MULTI_NODE_MULTI_WRITER is supported for block volumes only: no filesystem is safe on two nodes at once")
	}
	return n, nil
}

func hasMount(caps []*csi.VolumeCapability) bool {
	for _, c := range caps {
		if c.GetMount() != nil {
			return true
		}
	}
	return false
}

func controllerCapabilities() []*csi.ControllerServiceCapability {
	var out []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		out = append(out, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return out
}
