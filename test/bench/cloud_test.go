package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// TestCheckVolumes: a volume whose name was answered with another volume is a duplicate, one whose name was
// answered with it (or never answered) is left, and volumes without a CSI name are not the driver's.
func TestCheckVolumes(t *testing.T) {
	// CreateVolume's bucket never refills by itself, so only refillBuckets can admit a fifth.
	env := fakecloudtest.Start(t, fakecloudtest.Options{Faults: faults.Config{RateLimitProfile: faults.ProfileEC2,
		ActionRateLimits: map[string]faults.Limit{"CreateVolume": {RequestsPerSecond: 0, Burst: 4}}}})
	client := env.EC2(t, fakecloudtest.RetryConnectionsOnly)
	ctx := context.Background()
	create := func(name string) string {
		t.Helper()
		in := &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1)}
		if name != "" {
			in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeVolume,
				Tags: []ec2types.Tag{{Key: aws.String(cloud.TagName), Value: aws.String(name)}}}}
		}
		out, err := client.CreateVolume(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.VolumeId)
	}
	a1 := create("pvc-a")
	create("pvc-a") // a second volume under pvc-a: the caller was answered a1
	create("pvc-b") // left: its cycle never got an answer
	create("")      // not the driver's
	left, duplicated, attachments, err := checkVolumes(ctx, env.URL, map[string]string{"pvc-a": a1, "pvc-c": "vol-gone"})
	if err != nil {
		t.Fatal(err)
	}
	if left != 3 || duplicated != 1 || attachments != 0 {
		t.Errorf("left %d, duplicated %d, attachments %d; want 3, 1 and 0", left, duplicated, attachments)
	}

	if _, err := client.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1)}); err == nil {
		t.Fatal("a fifth CreateVolume passed an empty bucket")
	}
	if err := refillBuckets(ctx, env.URL); err != nil {
		t.Fatalf("refill buckets: %v", err)
	}
	create("")
}
