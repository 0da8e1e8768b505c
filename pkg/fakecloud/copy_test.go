package fakecloud_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

// TestCopyVolumes: CopyVolumes through the real SDK makes a new volume with the source's bytes in its zone,
// creating → available, from an attached source too, with ClientToken idempotency; it survives a restart.
func TestCopyVolumes(t *testing.T) {
	dataDir := t.TempDir()
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	c := env.EC2(t)
	ctx := context.Background()

	src := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(2), AvailabilityZone: aws.String(zoneB),
		VolumeType: types.VolumeTypeGp3, Encrypted: aws.Bool(true)})
	attached(t, c, src, env.Instances[zoneB], "/dev/xvdba")
	data := bytes.Repeat([]byte("diskforge clone "), 4096)
	f, err := os.OpenFile(env.Server.Backend.VolumeFile(src), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 1<<20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	in := &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), ClientToken: aws.String("pvc-clone-1"),
		VolumeType: types.VolumeTypeGp3, TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeVolume,
			Tags: []types.Tag{{Key: aws.String("app"), Value: aws.String("clone")}}}}}
	out, err := c.CopyVolumes(ctx, in)
	if err != nil {
		t.Fatalf("CopyVolumes: %v", err)
	}
	if len(out.Volumes) != 1 {
		t.Fatalf("CopyVolumes returned %d volumes", len(out.Volumes))
	}
	cp := out.Volumes[0]
	id := aws.ToString(cp.VolumeId)
	if id == src || aws.ToString(cp.SourceVolumeId) != src || aws.ToString(cp.AvailabilityZone) != zoneB ||
		aws.ToInt32(cp.Size) != 2 || !aws.ToBool(cp.Encrypted) {
		t.Errorf("copy %+v: want a new encrypted 2 GiB volume of %s in %s", cp, src, zoneB)
	}
	again, err := c.CopyVolumes(ctx, in)
	if err != nil || aws.ToString(again.Volumes[0].VolumeId) != id {
		t.Errorf("the same ClientToken again: %v, %v; want %s", again, err, id)
	}
	got := waitVolume(t, c, id, types.VolumeStateAvailable)
	if aws.ToString(got.SourceVolumeId) != src || len(got.Tags) != 1 {
		t.Errorf("described copy %+v", got)
	}
	copied, err := os.ReadFile(env.Server.Backend.VolumeFile(id))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(copied)) != 2<<30 || !bytes.Equal(copied[1<<20:1<<20+len(data)], data) {
		t.Errorf("the copy's file holds %d bytes and not the source's data", len(copied))
	}

	// A restart keeps the copy and its source.
	env.Close()
	env = fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dataDir})
	if got := describeVolume(t, env.EC2(t), id); aws.ToString(got.SourceVolumeId) != src {
		t.Errorf("after a restart: %+v", got)
	}
}

func TestCopyVolumesRefused(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{})
	c := env.EC2(t)
	ctx := context.Background()
	src := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(4)})
	tests := []struct {
		name string
		in   *ec2.CopyVolumesInput
		code string
	}{
		{"unknown source", &ec2.CopyVolumesInput{SourceVolumeId: aws.String("vol-0123456789abcdef0")}, "InvalidVolume.NotFound"},
		{"malformed source", &ec2.CopyVolumesInput{SourceVolumeId: aws.String("snap-1")}, "InvalidVolumeID.Malformed"},
		{"smaller than the source", &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), Size: aws.Int32(3)}, "InvalidParameterValue"},
		{"dry run", &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), DryRun: aws.Bool(true)}, "DryRunOperation"},
		{"token reused for another size", &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), Size: aws.Int32(5),
			ClientToken: aws.String("tok")}, ""},
		{"token reused, other size", &ec2.CopyVolumesInput{SourceVolumeId: aws.String(src), Size: aws.Int32(6),
			ClientToken: aws.String("tok")}, "IdempotentParameterMismatch"},
	}
	for _, tc := range tests {
		_, err := c.CopyVolumes(ctx, tc.in)
		if codeOf(err) != tc.code {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.code)
		}
	}
	out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{})
	if err != nil || len(out.Volumes) != 2 {
		t.Errorf("%d volumes after the refusals (%v), want the source and one copy", len(out.Volumes), err)
	}
}
