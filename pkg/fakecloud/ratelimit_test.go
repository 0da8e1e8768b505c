package fakecloud_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// TestUnfilteredDescribeBucket: through the wire, a DescribeVolumes naming neither a filter nor a page (an ID
// list is neither) draws from the ACTION:unfiltered bucket, and a filtered or paged one from the action's own.
// Buckets that never refill (RPS 0) keep the test free of timing.
func TestUnfilteredDescribeBucket(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Faults: faults.Config{
		RateLimitProfile: faults.ProfileEC2,
		ActionRateLimits: map[string]faults.Limit{
			"DescribeVolumes": {RequestsPerSecond: 0, Burst: 2},
			"DescribeVolumes" + faults.UnfilteredSuffix: {RequestsPerSecond: 0, Burst: 1},
		},
	}})
	client := env.EC2(t, fakecloudtest.RetryConnectionsOnly)
	ctx := context.Background()
	unfiltered := &ec2.DescribeVolumesInput{}
	byID := &ec2.DescribeVolumesInput{VolumeIds: []string{"vol-00000000000000001"}}
	filtered := &ec2.DescribeVolumesInput{Filters: []ec2types.Filter{{Name: aws.String("volume-id"), Values: []string{"vol-1"}}}}
	paged := &ec2.DescribeVolumesInput{MaxResults: aws.Int32(5)}
	for i, s := range []struct {
		in        *ec2.DescribeVolumesInput
		throttled bool
	}{
		{unfiltered, false}, {unfiltered, true}, {byID, true},
		{filtered, false}, {paged, false}, {filtered, true},
	} {
		_, err := client.DescribeVolumes(ctx, s.in)
		var apiErr smithy.APIError
		if got := errors.As(err, &apiErr) && apiErr.ErrorCode() == "RequestLimitExceeded"; got != s.throttled || err != nil && !got {
			t.Fatalf("call %d: err %v, want throttled=%v", i, err, s.throttled)
		}
	}
}
