package ec2cloud

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// GetInstance implements cloud.Cloud.
func (c *Cloud) GetInstance(ctx context.Context, instanceID string) (*cloud.Instance, error) {
	out, err := c.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
	if err != nil {
		return nil, classify("DescribeInstances", err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			if aws.ToString(in.InstanceId) == instanceID {
				return toInstance(in), nil
			}
		}
	}
	return nil, newError("get instance", cloud.ErrNotFound, "instance %s does not exist", instanceID)
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
