package driver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestControllerTags: templated class tags, --extra-tags, and tag changes through a VolumeAttributesClass, as
// fakecloud then holds them.
func TestControllerTags(t *testing.T) {
	var requests *fakecloudtest.RequestLog
	c, _ := newTestController(t, func(o *ec2cloud.Options) {
		o.ExtraTags = map[string]string{"team": "storage", "cost-center": "default"}
		requests, o.Endpoint = fakecloudtest.RecordingProxy(t, o.Endpoint)
	})
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-tags", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		Parameters: map[string]string{
			"tagSpecification_1":          "owner={{ .PVCNamespace }}/{{ .PVCName }}",
			"tagSpecification_2":          `billing={{ .PVCNamespace | field "-" 1 | toUpper }}`,
			"tagSpecification_3":          "cost-center=42",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "ns-prod", "csi.storage.k8s.io/pv/name": "pvc-77",
		}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	wantTags(t, c, id, map[string]string{"owner": "ns-prod/data", "billing": "PROD", "team": "storage", "cost-center": "42",
		"kubernetes.io/created-for/pvc/name": "data", "CSIVolumeName": "pvc-tags"})

	modifies := requests.Count("ModifyVolume")
	tests := []struct {
		name     string
		mutable  map[string]string
		code     codes.Code
		want     map[string]string
		wantGone []string
	}{
		{name: "set and overwrite, named by the resizer's metadata", mutable: map[string]string{
			"tagSpecification_1": "pv={{ .PVName }}", "tagSpecification_2": "team=platform",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "ns-prod", "csi.storage.k8s.io/pv/name": "pvc-77"},
			want: map[string]string{"pv": "pvc-77", "team": "platform", "owner": "ns-prod/data"}},
		{name: "delete", mutable: map[string]string{"tagDeletion_1": "billing", "tagDeletion_2": "never-there"},
			want: map[string]string{"team": "platform"}, wantGone: []string{"billing"}},
		{name: "the driver's own tag cannot go", mutable: map[string]string{"tagDeletion_1": "CSIVolumeName"}, code: codes.InvalidArgument,
			want: map[string]string{"CSIVolumeName": "pvc-tags"}},
		{name: "nor be set", mutable: map[string]string{"tagSpecification_1": "kubernetes.io/cluster/x=owned"}, code: codes.InvalidArgument,
			wantGone: []string{"kubernetes.io/cluster/x"}},
		{name: "a template that loops", mutable: map[string]string{"tagSpecification_1": "x={{ range 100000000 }}y{{ end }}"}, code: codes.InvalidArgument,
			wantGone: []string{"x"}},
		{name: "AWS's prefix", mutable: map[string]string{"tagSpecification_1": "aws:x=1"}, code: codes.InvalidArgument},
		{name: "names only: nothing to do", mutable: map[string]string{"csi.storage.k8s.io/pvc/name": "data"}, code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: tt.mutable})
			if status.Code(err) != tt.code {
				t.Fatalf("ControllerModifyVolume = %v, want %v", err, tt.code)
			}
			wantTags(t, c, id, tt.want, tt.wantGone...)
		})
	}
	if n := requests.Count("ModifyVolume"); n != modifies {
		t.Errorf("tag changes made %d ModifyVolume calls; they need none", n-modifies)
	}

	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-tags", SourceVolumeId: id, Parameters: map[string]string{
		"tagSpecification_1": "for={{ .VolumeSnapshotNamespace }}/{{ .VolumeSnapshotName }}",
		ParamSnapshotName:    "nightly", ParamSnapshotNamespace: "team-a", ParamSnapshotContentName: "snapcontent-1"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.cloud.GetSnapshot(ctx, snap.GetSnapshot().GetSnapshotId())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"for": "team-a/nightly", "team": "storage", "kubernetes.io/created-for/volumesnapshot/name": "nightly"} {
		if s.Tags[k] != v {
			t.Errorf("snapshot tag %q = %q, want %q (all: %v)", k, s.Tags[k], v, s.Tags)
		}
	}
}

func wantTags(t *testing.T, c *ControllerServer, id string, want map[string]string, gone ...string) {
	t.Helper()
	d, err := c.cloud.GetDisk(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if got, ok := d.Tags[k]; !ok || got != v {
			t.Errorf("tag %q = %q, want %q (all: %v)", k, got, v, d.Tags)
		}
	}
	for _, k := range gone {
		if _, ok := d.Tags[k]; ok {
			t.Errorf("tag %q is still there (all: %v)", k, d.Tags)
		}
	}
}
