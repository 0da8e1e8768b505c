package fakecloud_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// TestClientTokenOutlivesVolume: a deleted volume's ClientToken still answers that volume, in state deleted, after
// the volume is gone (and after a restart), so a retried create cannot make a second volume; a different request
// under the token is a mismatch; once the retention has passed the token makes a new volume.
func TestClientTokenOutlivesVolume(t *testing.T) {
	dir := t.TempDir()
	clock := testutil.NewClock()
	opts := fakecloudtest.Options{DataDir: dir, Clock: clock}
	env := fakecloudtest.Start(t, opts)
	c := env.EC2(t)
	ctx := context.Background()
	in := func(size int32) *ec2.CreateVolumeInput {
		return &ec2.CreateVolumeInput{AvailabilityZone: aws.String(zoneA), Size: aws.Int32(size), ClientToken: aws.String("pvc-reused")}
	}
	first := availableVolume(t, c, in(1))
	if _, err := c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: &first}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, first)

	replay := func(when string) {
		t.Helper()
		out := createVolume(t, c, in(1))
		if aws.ToString(out.VolumeId) != first || out.State != types.VolumeStateDeleted {
			t.Errorf("%s: the token answered %s %s, want %s deleted", when, aws.ToString(out.VolumeId), out.State, first)
		}
	}
	replay("after the volume is gone")
	if _, err := c.CreateVolume(ctx, in(2)); codeOf(err) != "IdempotentParameterMismatch" {
		t.Errorf("the token with another size: %v, want IdempotentParameterMismatch", err)
	}
	env.Close()
	env = fakecloudtest.Start(t, opts)
	c = env.EC2(t)
	clock.Advance(state.DefaultClientTokenRetention - time.Second)
	replay("after a restart, within the retention")
	if out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{}); err != nil || len(out.Volumes) != 0 {
		t.Errorf("the token's answers made volumes: %v, %v", out, err)
	}

	clock.Advance(time.Second)
	out := createVolume(t, c, in(1))
	if id := aws.ToString(out.VolumeId); id == first || out.State != types.VolumeStateCreating {
		t.Errorf("past the retention the token answered %s %s, want a new volume creating", id, out.State)
	}
}
