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
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-rate-src", VolumeCapabilities: []*csi.VolumeCapability{mountRWO},
		CapacityRange: &csi.CapacityRange{RequiredBytes: gib}, AccessibilityRequirements: &csi.TopologyRequirement{Requisite: zoneReq("us-east-1a")}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-rate", SourceVolumeId: vol.GetVolume().GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	fakecloudtest.WaitFor(t, 10*time.Second, "snapshot "+snapID, func(ctx context.Context) (bool, error) {
		out, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snapID})
		return err == nil && len(out.GetEntries()) == 1 && out.GetEntries()[0].GetSnapshot().GetReadyToUse(), err
	})
	fromSnap := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
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
