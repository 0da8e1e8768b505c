package driver

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// TestControllerPublishToNodeTerminatedMidway: a publish in flight when its node is terminated answers
// NotFound (the node is gone) as soon as the attachment goes with the node, not Internal once the grace for an
// attachment missing through EC2's eventual consistency (10 s by default) has run out.
func TestControllerPublishToNodeTerminatedMidway(t *testing.T) {
	const grace = 10 * time.Second // ec2cloud's default ConsistencyGrace, which newLifeDriver keeps
	d := newLifeDriver(t, 0, faults.Config{}, state.Durations{Attach: time.Hour})
	vol := d.create(t, "pvc-midway")
	answer := make(chan error, 1)
	go func() {
		_, err := d.publish(vol, lifeNode1)
		answer <- err
	}()
	fakecloudtest.WaitFor(t, 10*time.Second, "attachment attaching", func(ctx context.Context) (bool, error) {
		out, err := d.env.EC2(t).DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{vol}})
		return err == nil && len(out.Volumes) == 1 && len(out.Volumes[0].Attachments) == 1, err
	})
	if _, err := d.env.EC2(t).TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{lifeNode1}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := <-answer
	took := time.Since(start)
	t.Logf("publish answered %v after the terminate: %v", took.Round(time.Millisecond), err)
	if status.Code(err) != codes.NotFound {
		t.Errorf("publish to a node terminated midway: %v, want NotFound", err)
	}
	if took >= grace {
		t.Errorf("publish answered after %v, once the grace for a missing attachment (%v) had run out", took, grace)
	}
}
