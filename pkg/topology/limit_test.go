package topology

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/instancetypes"
)

func TestForeignVolumes(t *testing.T) {
	tests := []struct {
		name     string
		attached []string
		ours     []string
		want     int
	}{
		{"nothing attached", nil, nil, 0},
		{"only ours", []string{"sdf", "xvdg"}, []string{"/dev/sdf", "/dev/xvdg"}, 0},
		{"one foreign", []string{"xvdf", "xvdg", "xvdh"}, []string{"/dev/xvdf", "/dev/xvdg"}, 1},
		{"sd and xvd are one slot", []string{"sdf", "/dev/xvdg"}, []string{"/dev/xvdf"}, 1},
		// EC2 lists the volumes of the instance's start: ours attached since are not there and take nothing.
		{"ours missing from metadata", []string{"sdf"}, []string{"/dev/xvdba", "/dev/xvdbb"}, 1},
		// The controller's names are the driver's, attached now or detached since the start.
		{"driver's names without attachments", []string{"xvdaa", "xvdba", "sdbc", "/dev/xvddx"}, nil, 0},
		{"driver's names and foreign ones", []string{"xvdba", "xvdf", "xvdb", "xvda", "sda1", "xvddy", "xvdea"}, []string{""}, 6},
		{"blank entries are no volume", []string{"", " "}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ForeignVolumes(tc.attached, tc.ours); got != tc.want {
				t.Errorf("ForeignVolumes(%q, %q) = %d, want %d", tc.attached, tc.ours, got, tc.want)
			}
		})
	}
}

func TestLimitLess(t *testing.T) {
	c5, _ := instancetypes.Lookup("c5.large")
	typeLimit, known := TypeVolumeLimit("c5.large")
	if !known || typeLimit != int64(c5.VolumeLimit()) {
		t.Fatalf("TypeVolumeLimit(c5.large) = %d, %v; want %d, true", typeLimit, known, c5.VolumeLimit())
	}
	for _, tc := range []struct {
		foreign int
		want    int64
	}{{0, typeLimit}, {3, typeLimit - 3}, {int(typeLimit) - 1, 1}, {int(typeLimit), 1}, {100, 1}} {
		if got := LimitLess(typeLimit, tc.foreign); got != tc.want {
			t.Errorf("LimitLess(%d, %d) = %d, want %d", typeLimit, tc.foreign, got, tc.want)
		}
	}
}

// TestAttachedVolumes reads the volumes attached to an instance from fakecloud's instance metadata service,
// which lists the volumes attached when the instance last started, as EC2 does.
func TestAttachedVolumes(t *testing.T) {
	cloud := fakecloud.DefaultCloud()
	cloud.Instances = []state.InstanceSpec{{ID: fakecloudtest.InstanceA, Zone: "us-east-1a", InstanceType: "c5.large"}}
	e := fakecloudtest.Start(t, fakecloudtest.Options{Cloud: &cloud})
	md := NewMetadata(e.IMDS(t, fakecloudtest.InstanceA))
	client := e.EC2(t)
	ctx := context.Background()

	got, err := md.AttachedVolumes(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("AttachedVolumes of a fresh instance = %q, %v; want none", got, err)
	}
	var want []string
	for _, dev := range []string{"/dev/xvdba", "/dev/sdf"} {
		vol, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1),
			VolumeType: types.VolumeTypeGp3})
		if err != nil {
			t.Fatal(err)
		}
		fakecloudtest.WaitFor(t, 10*time.Second, "volume available", func(ctx context.Context) (bool, error) {
			out, err := client.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{*vol.VolumeId}})
			return err == nil && len(out.Volumes) == 1 && out.Volumes[0].State == types.VolumeStateAvailable, err
		})
		if _, err := client.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: vol.VolumeId,
			InstanceId: aws.String(fakecloudtest.InstanceA), Device: aws.String(dev)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, dev)
	}
	if got, err := md.AttachedVolumes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("AttachedVolumes before a start = %q, %v; want none", got, err)
	}
	e.RestartInstance(t, fakecloudtest.InstanceA)
	got, err = md.AttachedVolumes(ctx)
	if err != nil || len(got) != len(want) {
		t.Fatalf("AttachedVolumes = %q, %v; want the devices of %q", got, err, want)
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return deviceKey(g) == deviceKey(w) }) {
			t.Errorf("AttachedVolumes = %q: %s missing", got, w)
		}
	}
	if n := ForeignVolumes(got, nil); n != 1 {
		t.Errorf("ForeignVolumes(%q) = %d, want 1: /dev/xvdba is one of the driver's names", got, n)
	}
	id, err := md.Identity(ctx)
	if err != nil || id.BootVolumes != 1 {
		t.Errorf("Identity = %+v, %v; want 1 volume besides the root and the driver's", id, err)
	}
}
