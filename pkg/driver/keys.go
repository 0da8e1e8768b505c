package driver

// Keys of the publish context (controller → node) and the volume context (CreateVolume → node).
const (
	// PublishDevicePath is the device name the cloud attached the volume under (e.g. /dev/xvdba). The node
	// finds the real device by the volume ID where the device says whose it is (NVMe serial, loop backing
	// file), and by this name, checked, where it does not.
	PublishDevicePath = "devicePath"
	// PublishVolumeSize is the volume's size in bytes when it was published. Where the device has no identity
	// of its own (Xen instances: /dev/xvdX), the node takes the device PublishDevicePath names only when it is
	// at least that large (volumes only grow).
	PublishVolumeSize = "volumeSizeBytes"

	// Volume context keys carrying StorageClass format options to NodeStageVolume.
	ContextBlockSize      = "blockSize"
	ContextInodeSize      = "inodeSize"
	ContextBytesPerInode  = "bytesPerInode"
	ContextNumberOfInodes = "numberOfInodes"

	// ContextBlockAttachUntilInitialized ("true", from the class's blockAttachUntilInitialized) makes
	// ControllerPublishVolume wait for the disk's initialization before it attaches the disk.
	ContextBlockAttachUntilInitialized = "blockAttachUntilInitialized"
)

// Filesystems the node can format.
const (
	FSExt4    = "ext4"
	FSXFS     = "xfs"
	DefaultFS = FSExt4
)
