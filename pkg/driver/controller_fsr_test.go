package driver

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// readySnapshotSource snapshots a new 1 GiB volume in us-east-1a through CSI (names from name) and returns the
// snapshot, once ready, as a content source.
func readySnapshotSource(t *testing.T, c *ControllerServer, name string) *csi.VolumeContentSource {
	t.Helper()
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + name + "-src", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		CapacityRange: &csi.CapacityRange{RequiredBytes: gib}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-" + name, SourceVolumeId: vol.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot "+snapID, func(ctx context.Context) (bool, error) {
		out, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snapID})
		return err == nil && len(out.GetEntries()) == 1 && out.GetEntries()[0].GetSnapshot().GetReadyToUse(), err
	})
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
}

// initializationOf is the initialization-state of a volume's status, "" when it has none.
func initializationOf(t *testing.T, c *ec2.Client, id string) string {
	t.Helper()
	out, err := c.DescribeVolumeStatus(context.Background(), &ec2.DescribeVolumeStatusInput{VolumeIds: []string{id}})
	if err != nil || len(out.VolumeStatuses) != 1 {
		t.Fatalf("DescribeVolumeStatus %s: %v %v", id, out, err)
	}
	for _, d := range out.VolumeStatuses[0].VolumeStatus.Details {
		if d.Name == "initialization-state" {
			return aws.ToString(d.Status)
		}
	}
	return ""
}

// TestControllerBlockAttachUntilInitialized: with the class's blockAttachUntilInitialized, a publish of a disk
// restored at 300 MiB/s (1 GiB: about 3.4 s) attaches it only once it is initialized, and a publish whose
// context ends first attaches nothing; without it the disk is attached while it initializes.
func TestControllerBlockAttachUntilInitialized(t *testing.T) {
	c, env := newTestController(t)
	ec := env.EC2(t)
	ctx := context.Background()
	fromSnap := readySnapshotSource(t, c, "block")
	restore := func(name string, block bool) *csi.Volume {
		params := map[string]string{"volumeInitializationRate": "300"}
		if block {
			params["blockAttachUntilInitialized"] = "true"
		}
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
			VolumeContentSource: fromSnap, Parameters: params, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVolume()
	}
	publish := func(ctx context.Context, v *csi.Volume) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: fakecloudtest.InstanceA,
			VolumeCapability: mountRWO, VolumeContext: v.GetVolumeContext()})
		return err
	}

	plain := restore("pvc-block-off", false)
	if err := publish(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got := initializationOf(t, ec, plain.GetVolumeId()); got != "initializing" {
		t.Errorf("without blockAttachUntilInitialized, the publish waited: initialization %q once attached", got)
	}

	blocked := restore("pvc-block-on", true)
	if blocked.GetVolumeContext()[ContextBlockAttachUntilInitialized] != "true" {
		t.Fatalf("volume context %v", blocked.GetVolumeContext())
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := publish(short, blocked); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("publish with 300 ms while initializing: %v, want DeadlineExceeded", err)
	}
	if d := describeDisk(t, ec, blocked.GetVolumeId()); len(d.Attachments) != 0 {
		t.Fatalf("a publish that gave up attached the disk: %+v", d.Attachments)
	}
	start := time.Now()
	if err := publish(ctx, blocked); err != nil {
		t.Fatal(err)
	}
	if got := initializationOf(t, ec, blocked.GetVolumeId()); got != "completed" {
		t.Errorf("the publish returned after %v with the disk %q", time.Since(start), got)
	}
	if d := describeDisk(t, ec, blocked.GetVolumeId()); len(d.Attachments) != 1 {
		t.Errorf("attachments after the publish: %+v", d.Attachments)
	}
}

// describeDisk is one volume as fakecloud shows it.
func describeDisk(t *testing.T, c *ec2.Client, id string) ec2types.Volume {
	t.Helper()
	out, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil || len(out.Volumes) != 1 {
		t.Fatalf("DescribeVolumes %s: %v %v", id, out, err)
	}
	return out.Volumes[0]
}

// snapshotCount is how many snapshots the cloud holds.
func snapshotCount(t *testing.T, c *ec2.Client) int {
	t.Helper()
	out, err := c.DescribeSnapshots(context.Background(), &ec2.DescribeSnapshotsInput{OwnerIds: []string{"self"}})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Snapshots)
}

// TestControllerFastSnapshotRestore: a VolumeSnapshotClass's fastSnapshotRestoreAvailabilityZones turns fast
// snapshot restore on for the new snapshot in those zones, also on a repeated call; zones the region does not
// offer are refused before any snapshot is made; when the cloud refuses, the snapshot is deleted and the error
// returned, as the EBS driver does.
func TestControllerFastSnapshotRestore(t *testing.T) {
	c, env := newTestController(t)
	ec := env.EC2(t)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-fsr", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		CapacityRange: &csi.CapacityRange{RequiredBytes: gib}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	src := vol.GetVolume().GetVolumeId()
	fsr := func(zones string) map[string]string {
		return map[string]string{"fastSnapshotRestoreAvailabilityZones": zones}
	}

	cases := []struct {
		name   string
		params map[string]string
		code   codes.Code
		// zones are the zones the snapshot's fast snapshot restore is enabled in afterwards.
		zones     int
		snapshots int
	}{
		{"two zones", fsr("us-east-1a, us-east-1b"), codes.OK, 2, 1},
		{"unknown zone", fsr("us-east-1a,us-east-1z"), codes.InvalidArgument, 0, 0},
		{"empty entry", fsr("us-east-1a,,us-east-1b"), codes.InvalidArgument, 0, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshotCount(t, ec)
			name := "snap-fsr-" + string(rune('a'+i))
			for range 2 { // a repeated call is answered alike
				resp, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src, Parameters: tc.params})
				if status.Code(err) != tc.code {
					t.Fatalf("err = %v, want %s", err, tc.code)
				}
				if tc.code != codes.OK {
					continue
				}
				out, err := ec.DescribeFastSnapshotRestores(ctx, &ec2.DescribeFastSnapshotRestoresInput{Filters: []ec2types.Filter{
					{Name: aws.String("snapshot-id"), Values: []string{resp.GetSnapshot().GetSnapshotId()}}}})
				if err != nil || len(out.FastSnapshotRestores) != tc.zones {
					t.Errorf("fast snapshot restores %+v, %v; want %d", out, err, tc.zones)
				}
			}
			if got := snapshotCount(t, ec) - before; got != tc.snapshots {
				t.Errorf("%d snapshots made, want %d", got, tc.snapshots)
			}
		})
	}

	// The cloud refuses (as it does a role without ec2:EnableFastSnapshotRestores): the snapshot goes.
	if err := env.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"EnableFastSnapshotRestores": {Rate: 1, Code: "UnauthorizedOperation", Before: true}}}); err != nil {
		t.Fatal(err)
	}
	before := snapshotCount(t, ec)
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-fsr-refused", SourceVolumeId: src, Parameters: fsr("us-east-1a")})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("refused fast snapshot restore: %v, want PermissionDenied", err)
	}
	fakecloudtest.WaitFor(t, 10*time.Second, "the refused snapshot's deletion", func(context.Context) (bool, error) {
		return snapshotCount(t, ec) == before, nil
	})
}

// TestControllerVolumeInitializationRate: a StorageClass's volumeInitializationRate reaches CreateVolume for a
// restore, is left out for an empty volume (EC2 would refuse it), and out of range is refused.
func TestControllerVolumeInitializationRate(t *testing.T) {
	c, env := newTestController(t)
	ec := env.EC2(t)
	ctx := context.Background()
	fromSnap := readySnapshotSource(t, c, "rate")
	cases := []struct {
		name   string
		rate   string
		source *csi.VolumeContentSource
		code   codes.Code
		want   int32
	}{
		{"restore at 200 MiB/s", "200", fromSnap, codes.OK, 200},
		{"empty volume: ignored", "200", nil, codes.OK, 0},
		{"below 100", "50", fromSnap, codes.InvalidArgument, 0},
		{"above 300", "301", fromSnap, codes.InvalidArgument, 0},
		{"not a number", "fast", fromSnap, codes.InvalidArgument, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-rate-" + string(rune('a'+i)),
				VolumeCapabilities: []*csi.VolumeCapability{mountRWO}, VolumeContentSource: tc.source,
				Parameters: map[string]string{"volumeInitializationRate": tc.rate}})
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want %s", err, tc.code)
			}
			if tc.code != codes.OK {
				return
			}
			out, err := ec.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{resp.GetVolume().GetVolumeId()}})
			if err != nil || len(out.Volumes) != 1 || aws.ToInt32(out.Volumes[0].VolumeInitializationRate) != tc.want {
				t.Errorf("volume %+v, %v; want rate %d", out, err, tc.want)
			}
		})
	}
}
