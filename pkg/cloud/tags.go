package cloud

import "strings"

// Tag keys the driver puts on the resources it creates. TagName, TagSnapshotName and TagGroupSnapshotID make
// disks, snapshots and snapshot groups findable by their CSI names; the others record which cluster and claim they belong to.
const (
	// TagName holds the CSI volume name of a disk.
	TagName = "CSIVolumeName"
	// TagSnapshotName holds the CSI snapshot name of a snapshot.
	TagSnapshotName = "CSIVolumeSnapshotName"
	// TagGroupSnapshotName holds the CSI group snapshot name on each snapshot of a group, TagGroupSnapshotID the
	// group's ID, by which the group's snapshots are found.
	TagGroupSnapshotName = "CSIVolumeGroupSnapshotName"
	TagGroupSnapshotID   = "diskforge.io/group-snapshot-id"
	// TagGroupSnapshotSize holds how many snapshots the group has, so that what an interrupted create left
	// (fewer) is told from a whole group of other disks.
	TagGroupSnapshotSize = "diskforge.io/group-snapshot-size"
	// TagClusterID holds the cluster ID when one is configured.
	TagClusterID = "diskforge.io/cluster-id"
	// TagKubernetesClusterPrefix + cluster ID = "owned" is the tag Kubernetes cloud tooling looks for.
	TagKubernetesClusterPrefix = "kubernetes.io/cluster/"
	// TagPVCName, TagPVCNamespace and TagPVName record the claim a disk was provisioned for.
	TagPVCName      = "kubernetes.io/created-for/pvc/name"
	TagPVCNamespace = "kubernetes.io/created-for/pvc/namespace"
	TagPVName       = "kubernetes.io/created-for/pv/name"
)

// ReservedTag reports a key the driver sets itself: a class or flag may not set or remove it, since the
// driver finds its disks and snapshots, and tells its clusters apart, by them.
func ReservedTag(key string) bool {
	switch key {
	case TagName, TagSnapshotName, TagGroupSnapshotName, TagGroupSnapshotID, TagGroupSnapshotSize, TagClusterID, TagPVCName, TagPVCNamespace, TagPVName:
		return true
	}
	return strings.HasPrefix(key, TagKubernetesClusterPrefix)
}
