package nodelife

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/diskforge/diskforge/pkg/cloud/ec2cloud"
	"github.com/diskforge/diskforge/pkg/driver"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/topology"
)

// TestLimitsAfterStopStart is the instance metadata of EC2, which lists the volumes of the instance's last start:
// a volume the driver attached before a stop and start is listed after it, and stays listed once the driver has
// detached it. It never takes a slot, nor after the plugin restarts; a volume attached outside the driver before
// the start does. The controller attaches through fakecloud's API, as in a cluster.
func TestLimitsAfterStopStart(t *testing.T) {
	cfg := fakecloud.DefaultCloud()
	cfg.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "c5.large"}}
	env := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cfg, NoSync: true})
	ctx := testCtx(t)
	c, err := ec2cloud.New(ctx, ec2cloud.Options{Endpoint: env.URL, Region: env.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait: ec2cloud.WaitOptions{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := driver.NewControllerServer(c)
	sdk := env.EC2(t)
	typeLimit, _ := topology.TypeVolumeLimit("c5.large")
	metadata := topology.NewMetadata(env.IMDS(t, fakecloudtest.InstanceA))
	client := fake.NewClientset()
	attachments := startAttachments(t, client)
	newLimits := func() *Limits {
		return NewLimits(LimitOptions{TypeLimit: typeLimit, Initial: typeLimit, Attached: metadata.AttachedVolumes,
			Attachments: attachments, DeviceKey: driver.PublishDevicePath, MetadataRetry: 1})
	}
	l := newLimits()
	mount := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}

	// The driver attaches pv-a, and the attach/detach controller records it.
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pv-a", VolumeCapabilities: []*csi.VolumeCapability{mount},
		AccessibilityRequirements: &csi.TopologyRequirement{Preferred: []*csi.Topology{{Segments: topology.Segments("us-east-1a")}}}})
	if err != nil {
		t.Fatal(err)
	}
	volumeID := vol.GetVolume().GetVolumeId()
	pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: volumeID,
		NodeId: fakecloudtest.InstanceA, VolumeCapability: mount})
	if err != nil {
		t.Fatal(err)
	}
	device := pub.GetPublishContext()[driver.PublishDevicePath]
	va, err := client.StorageV1().VolumeAttachments().Create(ctx, attachment(testDriver, testNode, "pv-a", true, device), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A volume attached by hand, outside Kubernetes.
	byHand, err := sdk.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "the volume attached by hand available", func(ctx context.Context) (bool, error) {
		out, err := sdk.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*byHand.VolumeId}})
		return err == nil && out.Volumes[0].State == types.VolumeStateAvailable, err
	})
	if _, err := sdk.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: byHand.VolumeId, InstanceId: aws.String(fakecloudtest.InstanceA),
		Device: aws.String("/dev/sdf")}); err != nil {
		t.Fatal(err)
	}
	settle(t, l, typeLimit) // neither is in the metadata before the next start

	// The instance stops and starts with both attached; its metadata lists them now.
	env.RestartInstance(t, fakecloudtest.InstanceA)
	if listed, err := metadata.AttachedVolumes(ctx); err != nil || len(listed) != 2 {
		t.Fatalf("metadata after the start lists %q, %v; want the driver's %s and sdf", listed, err, device)
	}
	l = newLimits() // the plugin restarts with its node
	settle(t, l, typeLimit-1)

	// The driver detaches pv-a: the metadata still lists it until the next start, and it takes no slot.
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID,
		NodeId: fakecloudtest.InstanceA}); err != nil {
		t.Fatal(err)
	}
	if err := client.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the attachment gone from the cache", func() bool { vas, _ := attachments.List(); return len(vas) == 0 })
	if listed, err := metadata.AttachedVolumes(ctx); err != nil || len(listed) != 2 {
		t.Fatalf("metadata after the detach lists %q, %v; want both still, as of the start", listed, err)
	}
	for _, what := range []string{"after the detach", "after the plugin restarts"} {
		if what != "after the detach" {
			l = newLimits()
		}
		settle(t, l, typeLimit-1)
		for range 5 {
			if got := l.MaxVolumes(ctx); got != typeLimit-1 {
				t.Fatalf("%s: MaxVolumes = %d, want %d: only the volume attached by hand takes a slot", what, got, typeLimit-1)
			}
		}
	}
}
