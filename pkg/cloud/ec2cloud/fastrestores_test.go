package ec2cloud

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestEnableFastSnapshotRestores: zones the cloud accepts are enabled; EC2's per-zone refusals (a reply that
// is not an API error) become errors of their kinds, naming each refused zone.
func TestEnableFastSnapshotRestores(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-src", cloud.DiskOptions{})
	s, err := e.CreateSnapshot(testCtx(t), "snap-fsr", d.ID, cloud.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		snapshot string
		zones    []string
		kinds    []error
	}{
		{"two zones", s.ID, []string{zoneA, "us-east-1b"}, nil},
		{"again: idempotent", s.ID, []string{zoneA}, nil},
		{"an unknown zone among known ones", s.ID, []string{zoneA, "us-east-1z"}, []error{cloud.ErrInvalidArgument}},
		{"an unknown snapshot", "snap-0123456789abcdef0", []string{zoneA}, []error{cloud.ErrNotFound}},
		{"no zones", s.ID, nil, []error{cloud.ErrInvalidArgument}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := e.EnableFastSnapshotRestores(testCtx(t), tc.snapshot, tc.zones)
			if tc.kinds == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantKinds(t, err, tc.kinds...)
		})
	}
	out, err := e.raw(t).DescribeFastSnapshotRestores(testCtx(t), &ec2.DescribeFastSnapshotRestoresInput{Filters: []ec2types.Filter{
		{Name: aws.String("state"), Values: []string{"enabled"}}}})
	if err != nil || len(out.FastSnapshotRestores) != 2 {
		t.Errorf("enabled: %+v, %v; want zones A and B", out, err)
	}
}

// TestCreateDiskInitializationRate: the rate reaches CreateVolume for a restore.
func TestCreateDiskInitializationRate(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{})
	d := e.mustCreate(t, "pvc-src", cloud.DiskOptions{})
	s, err := e.CreateSnapshot(testCtx(t), "snap-rate", d.ID, cloud.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WaitForSnapshot(testCtx(t), s.ID); err != nil {
		t.Fatal(err)
	}
	r := e.mustCreate(t, "pvc-restored", cloud.DiskOptions{SnapshotID: s.ID, InitializationRate: 150})
	if v := e.rawVolume(t, r.ID); aws.ToInt32(v.VolumeInitializationRate) != 150 {
		t.Errorf("restored volume's rate %v, want 150", v.VolumeInitializationRate)
	}
}
