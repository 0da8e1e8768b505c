package ec2cloud

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
)

// EnableFastSnapshotRestores implements cloud.Cloud. EC2 answers per snapshot and zone and succeeds for the
// rest when some are refused, so the refusals are turned into an error: one per refused zone, joined, each
// classified by its code as an API error would be. Enabling is idempotent (an enabled zone is answered in its
// state), so the action's retryer may replay it.
func (c *Cloud) EnableFastSnapshotRestores(ctx context.Context, snapshotID string, zones []string) error {
	const action = "EnableFastSnapshotRestores"
	if snapshotID == "" || len(zones) == 0 {
		return newError(action, cloud.ErrInvalidArgument, "a snapshot and at least one zone are required")
	}
	out, err := c.ec2.EnableFastSnapshotRestores(ctx, &ec2.EnableFastSnapshotRestoresInput{
		SourceSnapshotIds: []string{snapshotID}, AvailabilityZones: zones}, c.retry.forAction(action))
	if err != nil {
		return classify(action, err)
	}
	var errs []error
	for _, item := range out.Unsuccessful {
		for _, e := range item.FastSnapshotRestoreStateErrors {
			if e.Error == nil {
				continue
			}
			code := aws.ToString(e.Error.Code)
			errs = append(errs, &cloud.Error{Op: action + " in " + aws.ToString(e.AvailabilityZone), Code: code,
				Message: aws.ToString(e.Error.Message), Kinds: kindsOf(code, http.StatusBadRequest)})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	states := make([]string, 0, len(out.Successful))
	for _, s := range out.Successful {
		states = append(states, aws.ToString(s.AvailabilityZone)+"="+string(s.State))
	}
	klog.V(2).InfoS("Fast snapshot restore enabled", "snapshotID", snapshotID, "zones", states)
	return nil
}
