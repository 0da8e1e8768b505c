//go:build e2e

package scenarios

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	driverName = "disk.csi.diskforge.io"
	// zoneLabel is the well-known zone label; the driver also reports topology.diskforge.io/zone.
	zoneLabel       = "topology.kubernetes.io/zone"
	driverZoneLabel = "topology.diskforge.io/zone"
	hostnameLabel   = "kubernetes.io/hostname"
	// runLabel marks every object a run creates (value: the run's namespace).
	runLabel = "e2e.diskforge.io/run"

	// The run's classes. Cluster-scoped: a run replaces leftovers of an earlier one and deletes them at its end.
	classXFS       = "e2e-xfs"
	classExt4      = "e2e-ext4"
	classZoneA     = "e2e-zone-a"
	classSnapshots = "e2e-snap"
	// classGroupSnapshots is the VolumeGroupSnapshotClass of scenario 4c.
	classGroupSnapshots = "e2e-group-snap"
	// classTags is the VolumeAttributesClass of scenario 9.
	classTags = "e2e-tags"
	// classIOPS is the StorageClass (io2 at 100 IOPS) and VolumeAttributesClass (1,000 IOPS) of scenario 10.
	classIOPS = "e2e-iops"
)

const gib = int64(1) << 30

// dataDir and blockDevicePath are where application pods have their volume.
const (
	dataDir         = "/data"
	blockDevicePath = "/dev/xvdz"
)

var (
	snapshotGroup   = "snapshot.storage.k8s.io"
	volumeSnapshots = schema.GroupVersionResource{Group: snapshotGroup, Version: "v1", Resource: "volumesnapshots"}
	snapshotClasses = schema.GroupVersionResource{Group: snapshotGroup, Version: "v1", Resource: "volumesnapshotclasses"}
	snapshotContent = schema.GroupVersionResource{Group: snapshotGroup, Version: "v1", Resource: "volumesnapshotcontents"}
)

// storageClass is a WaitForFirstConsumer class of the driver with reclaim policy Delete and expansion allowed,
// for fsType; zones, if any, become allowedTopologies on the well-known zone label.
func storageClass(name, runID, fsType string, zones ...string) *storagev1.StorageClass {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	expand := true
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: runID}},
		Provisioner: driverName,
		// Each volume is tagged with its claim: a template the provisioner's --extra-create-metadata fills.
		Parameters: map[string]string{"type": "gp3", "csi.storage.k8s.io/fstype": fsType,
			"tagSpecification_1": "claim={{ .PVCNamespace }}/{{ .PVCName }}"},
		ReclaimPolicy:        &reclaim,
		VolumeBindingMode:    &wffc,
		AllowVolumeExpansion: &expand,
	}
	if len(zones) > 0 {
		sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: zoneLabel, Values: zones},
		}}}
	}
	return sc
}

// pvc claims size of class, ReadWriteOnce; block selects volumeMode Block; snapshot, if set, is the data source.
func pvc(name, runID, class string, size int64, block bool, snapshot string) *corev1.PersistentVolumeClaim {
	mode := corev1.PersistentVolumeFilesystem
	if block {
		mode = corev1.PersistentVolumeBlock
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: runID}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeMode:       &mode,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			}},
		},
	}
	if snapshot != "" {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &snapshotGroup, Kind: "VolumeSnapshot",
			Name: snapshot}
	}
	return c
}

// clonePVC is a claim whose data source is another claim of the same namespace (a CSI clone).
func clonePVC(name, runID, class string, size int64, source string) *corev1.PersistentVolumeClaim {
	c := pvc(name, runID, class, size, false, "")
	c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source}
	return c
}

// pod runs one busybox container ("app", which the scenarios exec into) using claim, mounted at /data or, for
// block, as the device /dev/xvdz. It is pinned with a nodeSelector on the node's hostname label, not nodeName:
// WaitForFirstConsumer needs the scheduler to choose the node, so that the provisioner learns it.
func pod(name, runID, hostname, claim, image string, block bool) *corev1.Pod {
	p := appPod(name, runID, image, block, claim)
	p.Spec.NodeSelector = map[string]string{hostnameLabel: hostname}
	return p
}

// appPod runs one busybox container ("app") using claims, on whatever node the scheduler picks: one claim is
// mounted at /data or, for block, is the device /dev/xvdz; more are /data<i> or /dev/xvd<i> (i from 0).
func appPod(name, runID, image string, block bool, claims ...string) *corev1.Pod {
	grace := int64(1)
	c := corev1.Container{Name: "app", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}}
	var vols []corev1.Volume
	for i, claim := range claims {
		vol, dir, dev := "vol", dataDir, blockDevicePath
		if len(claims) > 1 {
			vol, dir, dev = fmt.Sprintf("vol%d", i), fmt.Sprintf("%s%d", dataDir, i), fmt.Sprintf("/dev/xvd%d", i)
		}
		if block {
			c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: vol, DevicePath: dev})
		} else {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: dir})
		}
		vols = append(vols, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: runID}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			TerminationGracePeriodSeconds: &grace,
			Volumes:                       vols,
		},
	}
}

// hostnameTerm selects the node with the hostname label.
func hostnameTerm(hostname string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{hostname}},
	}}
}

// requireNode is a node affinity the scheduler must honour: the node with hostname only.
func requireNode(hostname string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{hostnameTerm(hostname)},
		},
	}}
}

// preferNode is a node affinity the scheduler weighs: the node with hostname if it fits, another otherwise.
func preferNode(hostname string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 100, Preference: hostnameTerm(hostname)},
		},
	}}
}

// volumeSnapshotClass is the driver's snapshot class, deletion policy Delete.
func volumeSnapshotClass(name, runID string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion":     snapshotGroup + "/v1",
		"kind":           "VolumeSnapshotClass",
		"metadata":       map[string]any{"name": name, "labels": map[string]any{runLabel: runID}},
		"driver":         driverName,
		"deletionPolicy": "Delete",
	}}
}

// volumeSnapshot snapshots claim with class.
func volumeSnapshot(name, runID, class, claim string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": snapshotGroup + "/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{runLabel: runID}},
		"spec": map[string]any{
			"volumeSnapshotClassName": class,
			"source":                  map[string]any{"persistentVolumeClaimName": claim},
		},
	}}
}
