package selftest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// cluster is a fake API server that acts as the driver and kubelet would: a claim binds when created, a pod
// ends as pods decides, a snapshot is ready when snapshotReady, and a claim's capacity follows its request.
func cluster(t *testing.T, podFails map[string]string, snapshotReady bool) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	kube := fake.NewSimpleClientset()
	kube.PrependReactor("create", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pvc := a.(k8stesting.CreateAction).GetObject().(*corev1.PersistentVolumeClaim)
		pvc.Spec.VolumeName = "pv-" + pvc.Name
		pvc.Status.Capacity = pvc.Spec.Resources.Requests
		return false, nil, nil
	})
	kube.PrependReactor("patch", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := kube.Tracker().Get(a.GetResource(), a.GetNamespace(), a.(k8stesting.PatchAction).GetName())
		if err != nil {
			return true, nil, err
		}
		pvc := obj.(*corev1.PersistentVolumeClaim).DeepCopy()
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
		pvc.Status.Capacity = pvc.Spec.Resources.Requests
		return true, pvc, kube.Tracker().Update(a.GetResource(), pvc, a.GetNamespace())
	})
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Status.Phase = corev1.PodSucceeded
		for suffix, msg := range podFails {
			if strings.HasSuffix(pod.Name, suffix) {
				pod.Status.Phase = corev1.PodFailed
				pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "test", State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: msg}}}}
			}
		}
		return false, nil, nil
	})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{SnapshotResource: "VolumeSnapshotList"})
	dyn.PrependReactor("create", "volumesnapshots", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		if err := unstructured.SetNestedField(u.Object, snapshotReady, "status", "readyToUse"); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	return kube, dyn
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name          string
		podFails      map[string]string
		snapshotReady bool
		wantErr       []string // what the error says, "" for none
	}{
		{name: "every step passes", snapshotReady: true},
		{name: "the restored data differs", snapshotReady: true,
			podFails: map[string]string{"-reader": `read "old", want "new"`},
			wantErr:  []string{`step "restore the snapshot into a new claim and read the data back" failed`, `read "old", want "new"`}},
		{name: "the writer cannot write", snapshotReady: true,
			podFails: map[string]string{"-writer": "sh: can't create /data/data: Read-only file system"},
			wantErr:  []string{`step "write data to the claim from a pod" failed`, "Read-only file system"}},
		{name: "the snapshot never gets ready",
			wantErr: []string{`step "take a snapshot of the claim" failed`, "waiting for the snapshot to be ready to use"}},
		{name: "the filesystem did not grow", snapshotReady: true,
			podFails: map[string]string{"-grown": "filesystem of 1000000 KiB, want at least 1887436"},
			wantErr:  []string{`step "expand the claim and read the data again" failed`, "filesystem of 1000000 KiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, dyn := cluster(t, tc.podFails, tc.snapshotReady)
			var steps []string
			err := Run(context.Background(), kube, dyn, Options{Namespace: "ns", StorageClass: "sc", SnapshotClass: "vsc",
				Image: "img", Size: resource.MustParse("1Gi"), ExpandedSize: resource.MustParse("2Gi"), Prefix: "t",
				StepTimeout: 300 * time.Millisecond, Poll: 5 * time.Millisecond,
				Log: func(f string, a ...any) { steps = append(steps, f) }})
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("Run: %v", err)
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Run error %v, want one saying %q", err, want)
				}
			}
			// Nothing is left, whatever failed.
			claims, _ := kube.CoreV1().PersistentVolumeClaims("ns").List(context.Background(), metav1.ListOptions{})
			pods, _ := kube.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
			snaps, _ := dyn.Resource(SnapshotResource).Namespace("ns").List(context.Background(), metav1.ListOptions{})
			if len(claims.Items)+len(pods.Items)+len(snaps.Items) != 0 {
				t.Errorf("left %d claims, %d pods, %d snapshots", len(claims.Items), len(pods.Items), len(snaps.Items))
			}
		})
	}
}
