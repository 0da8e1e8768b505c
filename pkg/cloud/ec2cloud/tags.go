package ec2cloud

import (
	"context"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// TagDisk implements cloud.Cloud: CreateTags for set, then DeleteTags for remove. Both are idempotent at EC2,
// so a retried modification applies them again harmlessly. The driver's own keys are refused: without them
// it could no longer find the disk by name or tell its cluster.
func (c *Cloud) TagDisk(ctx context.Context, volumeID string, set map[string]string, remove []string) error {
	const op = "tag disk"
	for _, k := range slices.Concat(slices.Collect(maps.Keys(set)), remove) {
		if cloud.ReservedTag(k) {
			return newError(op, cloud.ErrInvalidArgument, "tag %q is the driver's own", k)
		}
	}
	if len(set) > 0 {
		in := &ec2.CreateTagsInput{Resources: []string{volumeID}, Tags: tagList(set)}
		if _, err := c.ec2.CreateTags(ctx, in, c.retry.forAction("CreateTags")); err != nil {
			return classify("CreateTags", err)
		}
	}
	if len(remove) > 0 {
		keys := make([]ec2types.Tag, 0, len(remove))
		for _, k := range slices.Sorted(slices.Values(remove)) {
			keys = append(keys, ec2types.Tag{Key: aws.String(k)})
		}
		in := &ec2.DeleteTagsInput{Resources: []string{volumeID}, Tags: keys}
		if _, err := c.ec2.DeleteTags(ctx, in, c.retry.forAction("DeleteTags")); err != nil {
			return classify("DeleteTags", err)
		}
	}
	klog.V(2).InfoS("Disk tags changed", "volumeID", volumeID, "set", len(set), "removed", len(remove))
	return nil
}
