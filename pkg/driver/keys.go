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
	// ContextExt4BigAlloc is "true" for ext4 with clustered allocation (mke2fs -O bigalloc), ContextExt4ClusterSize
	// its cluster size in bytes (-C): a database's pages then sit in one cluster each, never torn across two.
	ContextExt4BigAlloc    = "ext4BigAlloc"
	ContextExt4ClusterSize = "ext4ClusterSize"

	// ContextPVCNamespace and ContextPVCName are the claim the volume was provisioned for (from the provisioner's
	// --extra-create-metadata): the node labels the volume's metrics with them.
	ContextPVCNamespace = "pvcNamespace"
	ContextPVCName      = "pvcName"

	// ContextBlockAttachUntilInitialized ("true", from the class's blockAttachUntilInitialized) makes
	// ControllerPublishVolume wait for the disk's initialization before it attaches the disk.
	ContextBlockAttachUntilInitialized = "blockAttachUntilInitialized"
)

// Filesystems the node can format.
const (
	FSExt3    = "ext3"
	FSExt4    = "ext4"
	FSXFS     = "xfs"
	DefaultFS = FSExt4
)

// fsTypes lists the filesystems the node formats, for errors.
const fsTypes = "ext3, ext4, xfs"

// supportedFS reports whether the node can format fs.
func supportedFS(fs string) bool { return fs == FSExt3 || fs == FSExt4 || fs == FSXFS }

// extFS reports whether fs is one of the ext family mke2fs makes, which e2fsck checks and resize2fs and the
// kernel's ext4 driver (mounting ext3 too) grow.
func extFS(fs string) bool { return fs == FSExt3 || fs == FSExt4 }
