package fakecloud_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

func autoEnableIO(t *testing.T, c *ec2.Client, id string) bool {
	t.Helper()
	out, err := c.DescribeVolumeAttribute(context.Background(), &ec2.DescribeVolumeAttributeInput{VolumeId: &id, Attribute: types.VolumeAttributeNameAutoEnableIO})
	if err != nil {
		t.Fatalf("DescribeVolumeAttribute: %v", err)
	}
	if aws.ToString(out.VolumeId) != id || out.AutoEnableIO == nil || out.ProductCodes != nil {
		t.Fatalf("DescribeVolumeAttribute autoEnableIO of %s: %+v", id, out)
	}
	return aws.ToBool(out.AutoEnableIO.Value)
}

func TestVolumeAttributes(t *testing.T) {
	dir := t.TempDir()
	env := fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c := env.EC2(t)
	ctx := context.Background()
	id := availableVolume(t, c, &ec2.CreateVolumeInput{Size: aws.Int32(1)})

	if autoEnableIO(t, c, id) {
		t.Fatal("a new volume has autoEnableIO on")
	}
	codes, err := c.DescribeVolumeAttribute(ctx, &ec2.DescribeVolumeAttributeInput{VolumeId: &id, Attribute: types.VolumeAttributeNameProductCodes})
	if err != nil || codes.AutoEnableIO != nil || len(codes.ProductCodes) != 0 {
		t.Fatalf("productCodes: %+v, %v", codes, err)
	}
	on := &types.AttributeBooleanValue{Value: aws.Bool(true)}
	if _, err := c.ModifyVolumeAttribute(ctx, &ec2.ModifyVolumeAttributeInput{VolumeId: &id, AutoEnableIO: on, DryRun: aws.Bool(true)}); codeOf(err) != "DryRunOperation" {
		t.Fatalf("DryRun: %v", err)
	}
	if autoEnableIO(t, c, id) {
		t.Fatal("a dry run changed autoEnableIO")
	}
	if _, err := c.ModifyVolumeAttribute(ctx, &ec2.ModifyVolumeAttributeInput{VolumeId: &id, AutoEnableIO: on}); err != nil {
		t.Fatal(err)
	}
	env.Close()
	env = fakecloudtest.Start(t, fakecloudtest.Options{DataDir: dir})
	c = env.EC2(t)
	if !autoEnableIO(t, c, id) {
		t.Fatal("autoEnableIO set, then off after a restart")
	}

	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"describe: an attribute volumes lack", func() error {
			_, err := c.DescribeVolumeAttribute(ctx, &ec2.DescribeVolumeAttributeInput{VolumeId: &id, Attribute: "createVolumePermission"})
			return err
		}, "InvalidParameterValue"},
		{"describe: an unknown volume", func() error {
			_, err := c.DescribeVolumeAttribute(ctx, &ec2.DescribeVolumeAttributeInput{VolumeId: aws.String("vol-0123456789abcdef0"), Attribute: types.VolumeAttributeNameAutoEnableIO})
			return err
		}, "InvalidVolume.NotFound"},
		{"describe: a dry run", func() error {
			_, err := c.DescribeVolumeAttribute(ctx, &ec2.DescribeVolumeAttributeInput{VolumeId: &id, Attribute: types.VolumeAttributeNameAutoEnableIO, DryRun: aws.Bool(true)})
			return err
		}, "DryRunOperation"},
		{"modify: no value", func() error {
			_, err := c.ModifyVolumeAttribute(ctx, &ec2.ModifyVolumeAttributeInput{VolumeId: &id})
			return err
		}, "MissingParameter"},
		{"modify: a malformed volume ID", func() error {
			_, err := c.ModifyVolumeAttribute(ctx, &ec2.ModifyVolumeAttributeInput{VolumeId: aws.String("volume-1"), AutoEnableIO: on})
			return err
		}, "InvalidVolumeID.Malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); codeOf(err) != tc.code {
				t.Errorf("got %v, want %s", err, tc.code)
			}
		})
	}
}
