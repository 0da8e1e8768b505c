package ec2cloud

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// GetInstance implements cloud.Cloud. It goes through the instance batcher, so the first attaches to many
// instances at once learn their devices in one call.
func (c *Cloud) GetInstance(ctx context.Context, instanceID string) (*cloud.Instance, error) {
	in, err := c.describeInstance(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	return toInstance(in), nil
}

// describeInstance is EC2's description of an instance, through the instance batcher.
func (c *Cloud) describeInstance(ctx context.Context, instanceID string) (ec2types.Instance, error) {
	o, err := c.instances.get(ctx, instanceID)
	switch {
	case err != nil:
		return ec2types.Instance{}, fmt.Errorf("get instance %s: %w", instanceID, err)
	case o.err != nil:
		return ec2types.Instance{}, classify("DescribeInstances", o.err)
	case !o.found:
		return ec2types.Instance{}, newError("get instance", cloud.ErrNotFound, "instance %s does not exist", instanceID)
	}
	return o.value, nil
}

// fetchInstances is the instance batcher's call: DescribeInstances with an instance-id filter, which (unlike
// InstanceIds) does not fail as a whole when one instance does not exist.
func (c *Cloud) fetchInstances(ctx context.Context, ids []string) (map[string]ec2types.Instance, error) {
	in := &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{filter("instance-id", ids...)}, MaxResults: aws.Int32(1000)}
	out := make(map[string]ec2types.Instance, len(ids))
	for p := ec2.NewDescribeInstancesPaginator(c.ec2, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, i := range r.Instances {
				out[aws.ToString(i.InstanceId)] = i
			}
		}
	}
	return out, nil
}

// describeInstanceDevices feeds the device allocator.
func (c *Cloud) describeInstanceDevices(ctx context.Context, instanceID string) (map[string]string, error) {
	in, err := c.GetInstance(ctx, instanceID)
	if err != nil {
		return nil, err
	}
	return in.Devices, nil
}

// ListZones implements cloud.Cloud.
func (c *Cloud) ListZones(ctx context.Context) ([]cloud.Zone, error) {
	out, err := c.ec2.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		return nil, classify("DescribeAvailabilityZones", err)
	}
	zones := make([]cloud.Zone, 0, len(out.AvailabilityZones))
	for _, z := range out.AvailabilityZones {
		zones = append(zones, cloud.Zone{Name: aws.ToString(z.ZoneName), ID: aws.ToString(z.ZoneId), State: string(z.State)})
	}
	return zones, nil
}
