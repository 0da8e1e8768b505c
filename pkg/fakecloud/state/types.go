package state

import "time"

// Volume states, attachment states, modification states and snapshot states, spelled as EC2 spells them.
const (
	VolumeCreating  = "creating"
	VolumeAvailable = "available"
	VolumeInUse     = "in-use"
	VolumeDeleting  = "deleting"
	VolumeDeleted   = "deleted"
	VolumeError     = "error"

	AttachAttaching = "attaching"
	AttachAttached  = "attached"
	AttachDetaching = "detaching"
	AttachDetached  = "detached"
	AttachBusy      = "busy"

	ModModifying  = "modifying"
	ModOptimizing = "optimizing"
	ModCompleted  = "completed"
	ModFailed     = "failed"

	SnapshotPending   = "pending"
	SnapshotCompleted = "completed"
	SnapshotError     = "error"

	InstancePending      = "pending"
	InstanceRunning      = "running"
	InstanceShuttingDown = "shutting-down"
	InstanceTerminated   = "terminated"
	InstanceStopping     = "stopping"
	InstanceStopped      = "stopped"
)

// InstanceStateCode is EC2's numeric code of an instance state (the low byte of instanceState/code).
func InstanceStateCode(name string) int32 {
	switch name {
	case InstancePending:
		return 0
	case InstanceRunning:
		return 16
	case InstanceShuttingDown:
		return 32
	case InstanceTerminated:
		return 48
	case InstanceStopping:
		return 64
	case InstanceStopped:
		return 80
	}
	return 16
}

// Names of transitions that fault injection can hold still.
const (
	TransitionVolumeCreate = "volume-create"
	TransitionVolumeDelete = "volume-delete"
	TransitionAttach       = "attach"
	TransitionDetach       = "detach"
	TransitionModify       = "modify"
	TransitionSnapshot     = "snapshot"
)

// Tag is a key/value pair on a resource.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Volume is an EBS volume. Records handed out by State are copies.
type Volume struct {
	ID         string `json:"id"`
	Zone       string `json:"zone"`
	Type       string `json:"type"`
	SizeGiB    int32  `json:"sizeGiB"`
	Iops       int32  `json:"iops,omitempty"`
	Throughput int32  `json:"throughput,omitempty"`
	Encrypted  bool   `json:"encrypted,omitempty"`
	KmsKeyID   string `json:"kmsKeyId,omitempty"`
	SnapshotID string `json:"snapshotId,omitempty"`
	// SourceVolumeID is the volume this one is a copy of (CopyVolumes).
	SourceVolumeID string       `json:"sourceVolumeId,omitempty"`
	MultiAttach    bool         `json:"multiAttach,omitempty"`
	State          string       `json:"state"`
	CreateTime     time.Time    `json:"createTime"`
	Tags           []Tag        `json:"tags,omitempty"`
	Attachments    []Attachment `json:"attachments,omitempty"`
	DueAt          time.Time    `json:"dueAt,omitempty"`
	ModHistory     []time.Time  `json:"modHistory,omitempty"`
	ClientToken    string       `json:"clientToken,omitempty"`
	ParamsHash     string       `json:"paramsHash,omitempty"`
	// InitRate is CreateVolume's VolumeInitializationRate in MiB/s; 0 when none was asked.
	InitRate int32 `json:"initRate,omitempty"`
	// FastRestored: the volume restored a snapshot whose fast snapshot restore was enabled in its zone, so it
	// was initialized at creation.
	FastRestored bool `json:"fastRestored,omitempty"`
	// SourceGiB is the size of the snapshot restored or the volume copied: what initialization fetches.
	SourceGiB int32 `json:"sourceGiB,omitempty"`
	// AutoEnableIO is the volume's autoEnableIO attribute (ModifyVolumeAttribute).
	AutoEnableIO bool `json:"autoEnableIO,omitempty"`
}

// Attachment binds a volume to an instance under a device name.
type Attachment struct {
	VolumeID   string    `json:"volumeId"`
	InstanceID string    `json:"instanceId"`
	Device     string    `json:"device"`
	State      string    `json:"state"`
	AttachTime time.Time `json:"attachTime"`
	DueAt      time.Time `json:"dueAt,omitempty"`
	Force      bool      `json:"force,omitempty"`
	// DeleteOnTermination deletes the volume when its instance's termination ends this attachment
	// (ModifyInstanceAttribute sets it; AttachVolume leaves it false, as EC2 does).
	DeleteOnTermination bool `json:"deleteOnTermination,omitempty"`
	// Terminated: the instance's termination ended this attachment (DeleteOnTermination applies).
	Terminated bool `json:"terminated,omitempty"`
	// Held: a counted stuck fault (attach:N) took this attachment; it stays attaching until it is detached.
	Held bool `json:"held,omitempty"`
	// HostDevice is the block device the backend bound (a loop device), reported to operators, not to EC2 clients.
	HostDevice string `json:"hostDevice,omitempty"`
}

// Modification is the latest ModifyVolume of a volume.
type Modification struct {
	VolumeID         string    `json:"volumeId"`
	State            string    `json:"state"`
	StatusMessage    string    `json:"statusMessage,omitempty"`
	TargetSize       int32     `json:"targetSize"`
	TargetIops       int32     `json:"targetIops"`
	TargetType       string    `json:"targetType"`
	TargetThroughput int32     `json:"targetThroughput"`
	TargetMulti      bool      `json:"targetMulti"`
	OriginalSize     int32     `json:"originalSize"`
	OriginalIops     int32     `json:"originalIops"`
	OriginalType     string    `json:"originalType"`
	OriginalThrough  int32     `json:"originalThroughput"`
	OriginalMulti    bool      `json:"originalMulti"`
	Progress         int64     `json:"progress"`
	StartTime        time.Time `json:"startTime"`
	EndTime          time.Time `json:"endTime,omitempty"`
	OptimizingAt     time.Time `json:"optimizingAt"`
	CompletedAt      time.Time `json:"completedAt"`
}

// Snapshot is a point-in-time copy of a volume.
type Snapshot struct {
	ID             string    `json:"id"`
	VolumeID       string    `json:"volumeId"`
	State          string    `json:"state"`
	StatusMessage  string    `json:"statusMessage,omitempty"`
	Progress       int       `json:"progress"`
	StartTime      time.Time `json:"startTime"`
	CompletionTime time.Time `json:"completionTime,omitempty"`
	VolumeSize     int32     `json:"volumeSize"`
	Description    string    `json:"description,omitempty"`
	Encrypted      bool      `json:"encrypted,omitempty"`
	KmsKeyID       string    `json:"kmsKeyId,omitempty"`
	OwnerID        string    `json:"ownerId"`
	Zone           string    `json:"zone"`
	Tags           []Tag     `json:"tags,omitempty"`
	DueAt          time.Time `json:"dueAt,omitempty"`
	// Copying: the volume's bytes are not all in the snapshot's file yet (a worker copies them).
	Copying bool `json:"copying,omitempty"`
	// Capture is how the point in time was fixed (blockdev.Capture), which says whether a copy cut short by a
	// restart may run again.
	Capture string `json:"capture,omitempty"`
	// SourceSnapshotID is the snapshot this one is a copy of (CopySnapshot).
	SourceSnapshotID string `json:"sourceSnapshotId,omitempty"`
	// SharedWith are the accounts given createVolumePermission; Public is the group all's permission.
	SharedWith []string `json:"sharedWith,omitempty"`
	Public     bool     `json:"public,omitempty"`
	// Lock is the snapshot's lock (LockSnapshot), nil when it has none.
	Lock *SnapshotLock `json:"lock,omitempty"`
	// Tiering is the snapshot's last archive or restore (snapshot_tiers.go), nil when it never had one.
	Tiering *SnapshotTiering `json:"tiering,omitempty"`
	// StorageTier and RestoreExpiry are the tiering's view at the time the record was handed out; not stored.
	StorageTier   string    `json:"-"`
	RestoreExpiry time.Time `json:"-"`
}

// SnapshotTiering is a snapshot's last ModifySnapshotTier and RestoreSnapshotTier: archival runs from
// ArchiveStart to ArchivedAt; a restore (permanent, or temporary until RestoreExpiry) follows it.
type SnapshotTiering struct {
	ArchiveStart  time.Time `json:"archiveStart"`
	ArchivedAt    time.Time `json:"archivedAt"`
	RestoreStart  time.Time `json:"restoreStart,omitempty"`
	RestoreDays   int32     `json:"restoreDays,omitempty"`
	RestoreExpiry time.Time `json:"restoreExpiry,omitempty"`
	Permanent     bool      `json:"permanent,omitempty"`
}

// SnapshotLock is a snapshot's lock: its mode, when it was made and ends, and a compliance lock's cooling-off
// period. Its state follows from the time (snapshot_locks.go).
type SnapshotLock struct {
	Mode      string    `json:"mode"`
	CreatedOn time.Time `json:"createdOn"`
	// DurationStart and DurationDays are set when the lock was asked for a number of days; ExpiresOn always.
	DurationStart time.Time `json:"durationStart,omitempty"`
	DurationDays  int32     `json:"durationDays,omitempty"`
	ExpiresOn     time.Time `json:"expiresOn"`
	CoolOffHours  int32     `json:"coolOffHours,omitempty"`
	CoolOffEnds   time.Time `json:"coolOffEnds,omitempty"`
}

// Instance is a machine volumes attach to: a node of a test cluster.
type Instance struct {
	ID              string    `json:"id"`
	Zone            string    `json:"zone"`
	InstanceType    string    `json:"instanceType"`
	AttachmentLimit int       `json:"attachmentLimit"`
	LaunchTime      time.Time `json:"launchTime"`
	Tags            []Tag     `json:"tags,omitempty"`
	// State is EC2's instance state; records from before states existed load as running.
	State string `json:"state,omitempty"`
	// DueAt ends a transitional state (pending, stopping, shutting-down); for a terminated instance it is when
	// the record vanishes.
	DueAt time.Time `json:"dueAt,omitempty"`
	// StateReason is EC2's stateReason code of a stopped or terminated instance; TransitionReason its
	// stateTransitionReason.
	StateReason      string `json:"stateReason,omitempty"`
	TransitionReason string `json:"transitionReason,omitempty"`
	// StartDevices are the device names (without /dev/) of the volumes attached when the instance last went
	// running, in order of attachment: the instance metadata's block device mapping, which EC2 refreshes only then.
	StartDevices []string `json:"startDevices,omitempty"`
	// NetworkInterfaces is how many network interfaces the instance has (the instance metadata lists them); 0
	// is the primary one alone.
	NetworkInterfaces int `json:"networkInterfaces,omitempty"`
	// Launch is how RunInstances made the instance; nil for one registered (--instances, the admin API), which
	// has no root volume modelled.
	Launch *Launch `json:"launch,omitempty"`
}

// Launch is what RunInstances gave an instance: its image, its reservation and place in it, and the ClientToken
// that binds the reservation (ParamsHash fingerprints the request, to tell a retry from a different one).
type Launch struct {
	ImageID       string `json:"imageId"`
	ReservationID string `json:"reservationId"`
	LaunchIndex   int32  `json:"launchIndex"`
	ClientToken   string `json:"clientToken,omitempty"`
	ParamsHash    string `json:"paramsHash,omitempty"`
}

// Zone is an availability zone of the region.
type Zone struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// Filter is a Describe* filter: a name and values, matched with EC2's * and ? wildcards.
type Filter struct {
	Name   string
	Values []string
}

// Page asks for a page of a Describe* listing.
type Page struct {
	MaxResults *int32
	NextToken  string
}
