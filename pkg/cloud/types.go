package cloud

import "time"

// Disk states, as the cloud reports them.
const (
	DiskCreating  = "creating"
	DiskAvailable = "available"
	DiskInUse     = "in-use"
	DiskDeleting  = "deleting"
	DiskDeleted   = "deleted"
	DiskError     = "error"
)

// Attachment states.
const (
	AttachmentAttaching = "attaching"
	AttachmentAttached  = "attached"
	AttachmentDetaching = "detaching"
	AttachmentDetached  = "detached"
	AttachmentBusy      = "busy"
)

// Modification states.
const (
	ModificationModifying  = "modifying"
	ModificationOptimizing = "optimizing"
	ModificationCompleted  = "completed"
	ModificationFailed     = "failed"
)

// Instance states, as EC2 names them.
const (
	InstancePending      = "pending"
	InstanceRunning      = "running"
	InstanceStopping     = "stopping"
	InstanceStopped      = "stopped"
	InstanceShuttingDown = "shutting-down"
	InstanceTerminated   = "terminated"
)

// IsInstanceGone reports an instance state from which the instance never runs again (shutting down or
// terminated): it holds no disk for long, and none can be attached to it.
func IsInstanceGone(state string) bool {
	return state == InstanceShuttingDown || state == InstanceTerminated
}

// IsInstanceStopped reports a stopped or stopping instance: its disks stay attached until detached, and a
// stopped one accepts new attachments, which it sees when it starts.
func IsInstanceStopped(state string) bool {
	return state == InstanceStopping || state == InstanceStopped
}

// Snapshot states.
const (
	SnapshotPending   = "pending"
	SnapshotCompleted = "completed"
	SnapshotError     = "error"
)

// Disk is a block volume in one zone.
type Disk struct {
	ID string
	// Name is the CSI volume name the disk was created under (its TagName tag); empty for disks the driver
	// did not create.
	Name       string
	Zone       string
	SizeGiB    int32
	VolumeType string
	IOPS       int32
	Throughput int32
	Encrypted  bool
	KMSKeyID   string
	SnapshotID string
	// SourceDiskID is the disk this one is a copy of, if any.
	SourceDiskID string
	MultiAttach  bool
	State        string
	CreateTime   time.Time
	Tags         map[string]string
	Attachments  []Attachment
}

// Attachment binds a disk to an instance. VolumeID and Device are what the node needs to find the block
// device: the node looks the device up by the volume ID (its serial or backing file), and Device is the name
// the cloud was asked to use.
type Attachment struct {
	VolumeID   string
	InstanceID string
	Device     string
	State      string
	// AttachTime is when the cloud began the attachment (its clock); zero when it did not say. It tells how
	// long an attachment has been attaching, also across calls (see WaitForAttachment).
	AttachTime time.Time
}

// DiskOptions are the parameters of a new disk.
type DiskOptions struct {
	// Zone is the availability zone; required.
	Zone string
	// SizeGiB is the size; required unless SnapshotID or SourceDiskID is set (then it defaults to the source's).
	SizeGiB    int32
	VolumeType string
	// IOPS and Throughput are left to the cloud's default for the type when zero.
	IOPS       int32
	Throughput int32
	Encrypted  bool
	KMSKeyID   string
	SnapshotID string
	// InitializationRate is the rate, in MiB/s, at which a disk restored from SnapshotID is initialized from
	// it (EBS's Provisioned Rate for Volume Initialization); 0 leaves it to the cloud. Only with SnapshotID.
	InitializationRate int32
	// SourceDiskID makes the disk a copy of another (a clone): the copy is made in the source's zone, which
	// Zone must name, with at least its size (SizeGiB defaults to it).
	SourceDiskID string
	MultiAttach  bool
	// PVCName, PVCNamespace and PVName are recorded as tags (TagPVCName...) when set.
	PVCName      string
	PVCNamespace string
	PVName       string
	// Tags are extra tags; the driver's own keys (TagName, cluster tags) cannot be overridden.
	Tags map[string]string
}

// ModifyOptions are the targets of a modification; zero values keep the disk's current value.
type ModifyOptions struct {
	SizeGiB    int32
	VolumeType string
	IOPS       int32
	Throughput int32
}

// Modification is the state of a disk's latest modification.
type Modification struct {
	VolumeID         string
	State            string
	StatusMessage    string
	TargetSizeGiB    int32
	TargetVolumeType string
	TargetIOPS       int32
	TargetThroughput int32
	// Progress is 0..100.
	Progress int64
}

// Snapshot is a point-in-time copy of a disk.
type Snapshot struct {
	ID string
	// Name is the CSI snapshot name (its TagSnapshotName tag); empty for snapshots the driver did not create.
	Name string
	// GroupID is the ID of the snapshot group the snapshot belongs to (its TagGroupSnapshotID tag), if any.
	GroupID        string
	SourceVolumeID string
	SizeGiB        int32
	State          string
	// Progress is 0..100.
	Progress     int
	ReadyToUse   bool
	CreationTime time.Time
	Description  string
	Tags         map[string]string
}

// GroupIDPrefix begins every snapshot group ID: the cloud has no object for a group, so its IDs are the
// driver's own.
const GroupIDPrefix = "vgs-"

// SnapshotGroup is snapshots of several disks taken at one instant (one per instance, if taken with
// SnapshotGroupOptions.MultiInstance).
type SnapshotGroup struct {
	ID string
	// Name is the CSI group snapshot name.
	Name string
	// Snapshots are ordered by source disk ID.
	Snapshots []*Snapshot
	// CreationTime is the instant the snapshots were taken.
	CreationTime time.Time
}

// ReadyToUse reports whether every snapshot of the group is.
func (g *SnapshotGroup) ReadyToUse() bool {
	for _, s := range g.Snapshots {
		if !s.ReadyToUse {
			return false
		}
	}
	return len(g.Snapshots) > 0
}

// SnapshotOptions are the parameters of a new snapshot.
type SnapshotOptions struct {
	Description string
	Tags        map[string]string
}

// SnapshotGroupOptions are the parameters of a new snapshot group.
type SnapshotGroupOptions struct {
	SnapshotOptions
	// MultiInstance takes a group whose disks are not all attached to one instance anyway: one instant per
	// instance (their instants differ by the spacing of the calls), and detached disks one by one, which are
	// written by nothing.
	MultiInstance bool
}

// Instance is a machine disks attach to: a node.
type Instance struct {
	ID           string
	Zone         string
	InstanceType string
	State        string
	// AttachmentLimit is how many data volumes the instance can hold besides its root volume.
	AttachmentLimit int
	// Devices maps the device names in use on the instance (its root device included) to the volume behind
	// each, as far as the cloud reports them.
	Devices map[string]string
}

// Zone is an availability zone of the region.
type Zone struct {
	Name  string
	ID    string
	State string
}

// PageRequest asks for a page of a listing. MaxResults 0 lets the cloud choose the page size; NextToken is the
// token of the previous page, empty for the first.
type PageRequest struct {
	MaxResults int32
	NextToken  string
}

// DiskPage is a page of disks; NextToken is empty on the last page.
type DiskPage struct {
	Disks     []*Disk
	NextToken string
}

// SnapshotListOptions select snapshots to list.
type SnapshotListOptions struct {
	// SourceVolumeID limits the listing to snapshots of one disk when set.
	SourceVolumeID string
	Page           PageRequest
}

// SnapshotPage is a page of snapshots; NextToken is empty on the last page.
type SnapshotPage struct {
	Snapshots []*Snapshot
	NextToken string
}
