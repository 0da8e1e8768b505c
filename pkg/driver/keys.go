package driver

// Keys of the publish context (controller → node) and the volume context (CreateVolume → node).
const (
	// PublishDevicePath is the device name the cloud attached the volume under (e.g. /dev/xvdba). The node
	// finds the real device by the volume ID and uses this only as a hint.
	PublishDevicePath = "devicePath"

	// Volume context keys carrying StorageClass format options to NodeStageVolume.
	ContextBlockSize      = "blockSize"
	ContextInodeSize      = "inodeSize"
	ContextBytesPerInode  = "bytesPerInode"
	ContextNumberOfInodes = "numberOfInodes"
)

// Filesystems the node can format.
const (
	FSExt4    = "ext4"
	FSXFS     = "xfs"
	DefaultFS = FSExt4
)
