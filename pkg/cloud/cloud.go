// Package cloud is the driver's only view of the cloud: a narrow interface over domain types (disks,
// attachments, snapshots, modifications, instances, zones) and the sentinel errors its methods return.
// Nothing here knows about EC2; the EBS-style implementation lives in pkg/cloud/ec2cloud, and only it sees SDK
// types. Callers match errors with errors.Is against the sentinels in errors.go and map them to their own codes
// (gRPC codes in pkg/driver) in one place.
package cloud

import "context"

// Cloud manages disks for the driver. Every method takes a context and returns when it ends; methods that wait
// for asynchronous work poll until the work is done, fails, or the context ends. Methods are safe for
// concurrent use.
type Cloud interface {
	// CreateDisk creates a disk named name (the CSI volume name) and waits until it is available. It is
	// idempotent by name: a repeated call with the same name and options returns the same disk, also after a
	// lost reply. The same name with different options fails with ErrIdempotentParameterMismatch. A disk that
	// fails in the cloud is deleted and ErrFailed returned, so nothing leaks.
	CreateDisk(ctx context.Context, name string, opts DiskOptions) (*Disk, error)
	// DeleteDisk asks the cloud to delete a disk. It returns once the deletion is accepted (the disk is
	// deleting or gone and can no longer be attached); it does not wait for the disk to disappear. A disk that
	// does not exist gives ErrNotFound, an attached one ErrInUse.
	DeleteDisk(ctx context.Context, volumeID string) error
	// GetDisk describes one disk; ErrNotFound if there is none with that ID.
	GetDisk(ctx context.Context, volumeID string) (*Disk, error)
	// RecentDisk is what the cloud said of a disk within the last few seconds, if it said anything, without
	// asking again: for a decision that the next call's own answer corrects if the disk has changed since.
	RecentDisk(volumeID string) (*Disk, bool)
	// GetDiskByName finds the disk created under a CSI volume name; ErrNotFound if there is none.
	GetDiskByName(ctx context.Context, name string) (*Disk, error)
	// ListDisks lists the disks this driver created, a page at a time.
	ListDisks(ctx context.Context, page PageRequest) (*DiskPage, error)

	// AttachDisk attaches a disk to an instance under a free device name and waits until it is attached. It
	// is idempotent: a disk already attached to the instance returns its attachment. The attachment carries
	// what the node needs to find the device: the disk ID and the device name.
	AttachDisk(ctx context.Context, volumeID, instanceID string) (*Attachment, error)
	// WaitForAttachment waits until an attachment the caller has read as attaching is attached, without
	// asking the cloud to attach again: the idempotent answer to a repeated publish.
	WaitForAttachment(ctx context.Context, a Attachment) (*Attachment, error)
	// WaitForInitialization waits until a disk restored from a snapshot, or copied, is initialized: every block
	// fetched, so it runs at full speed. A disk with nothing to fetch returns at once; a missing one gives
	// ErrNotFound.
	WaitForInitialization(ctx context.Context, volumeID string) error
	// DetachDisk detaches a disk from an instance and waits until it is detached. A disk that is not attached
	// to the instance gives nil; a disk that does not exist gives ErrNotFound.
	DetachDisk(ctx context.Context, volumeID, instanceID string) error

	// ResizeDisk grows a disk to at least sizeGiB and waits until the new size is usable (the modification is
	// optimizing or completed). It returns the disk's size, which may be larger than asked for.
	ResizeDisk(ctx context.Context, volumeID string, sizeGiB int32) (int32, error)
	// ModifyDisk changes a disk's size, type, IOPS or throughput and waits until the change is usable. A disk
	// that already has the requested values is left alone.
	ModifyDisk(ctx context.Context, volumeID string, opts ModifyOptions) (*Modification, error)
	// TagDisk sets the tags in set (overwriting values) and removes the keys in remove from a disk; keys
	// absent already are no error. The driver's own keys (ReservedTag) give ErrInvalidArgument.
	TagDisk(ctx context.Context, volumeID string, set map[string]string, remove []string) error

	// CreateSnapshot snapshots a disk under a CSI snapshot name and returns without waiting for it to complete
	// (ReadyToUse tells). It is idempotent by name; a name already used for another disk's snapshot gives
	// ErrAlreadyExists.
	CreateSnapshot(ctx context.Context, name, volumeID string, opts SnapshotOptions) (*Snapshot, error)
	// EnableFastSnapshotRestores turns on fast snapshot restore for a snapshot in zones, so that disks
	// restored there are initialized at creation. It returns once the cloud has accepted it for every zone; the
	// restores become fast later, without the caller. A refusal for any zone (an unknown snapshot or zone)
	// gives an error matching its kind: ErrNotFound, ErrInvalidArgument.
	EnableFastSnapshotRestores(ctx context.Context, snapshotID string, zones []string) error
	// WaitForSnapshot waits until a snapshot is completed; ErrFailed if it fails in the cloud.
	WaitForSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error)
	// DeleteSnapshot deletes a snapshot; ErrNotFound if there is none.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
	// GetSnapshot describes one snapshot; ErrNotFound if there is none.
	GetSnapshot(ctx context.Context, snapshotID string) (*Snapshot, error)
	// GetSnapshotByName finds the snapshot created under a CSI snapshot name; ErrNotFound if there is none.
	GetSnapshotByName(ctx context.Context, name string) (*Snapshot, error)
	// ListSnapshots lists this driver's snapshots, optionally of one source disk, a page at a time.
	ListSnapshots(ctx context.Context, opts SnapshotListOptions) (*SnapshotPage, error)

	// CreateSnapshotGroup snapshots several disks at one instant (crash-consistent across them) under a CSI group
	// snapshot name, and returns without waiting for the snapshots to complete. The disks must all be attached
	// to one instance, whose other disks are left out; otherwise it gives ErrNotColocated and makes nothing,
	// unless opts.MultiInstance, which takes each instance's disks at one instant and detached disks alone. It
	// makes the whole group or nothing, and is idempotent by name: the same name with other disks gives
	// ErrAlreadyExists.
	CreateSnapshotGroup(ctx context.Context, name string, volumeIDs []string, opts SnapshotGroupOptions) (*SnapshotGroup, error)
	// GetSnapshotGroup describes the snapshots of a group; ErrNotFound if none is left.
	GetSnapshotGroup(ctx context.Context, groupID string) (*SnapshotGroup, error)

	// GetInstance describes an instance (a node); ErrNotFound if there is none.
	GetInstance(ctx context.Context, instanceID string) (*Instance, error)
	// ListZones lists the region's availability zones.
	ListZones(ctx context.Context) ([]Zone, error)
}
