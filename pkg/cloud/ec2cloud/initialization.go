package ec2cloud

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/cloud"
)

// initializationPollStart is the first interval of a wait for initialization, which takes seconds to hours:
// polls then grow to WaitOptions.Max.
const initializationPollStart = time.Second

// WaitForInitialization implements cloud.Cloud by polling DescribeVolumeStatus until the volume's
// initialization-state detail is completed. A volume that was never restored or copied has no such detail and
// is initialized already. Each poll is one call of its own (they are rare: publishes of classes that ask).
func (c *Cloud) WaitForInitialization(ctx context.Context, volumeID string) error {
	const action = "DescribeVolumeStatus"
	polls := c.wait.backOffFrom(min(initializationPollStart, c.wait.Max))
	start := time.Now()
	for {
		out, err := c.ec2.DescribeVolumeStatus(ctx, &ec2.DescribeVolumeStatusInput{VolumeIds: []string{volumeID}}, c.retry.forAction(action))
		if err != nil {
			return classify(action, err)
		}
		if len(out.VolumeStatuses) == 0 {
			return newError("wait for initialization", cloud.ErrNotFound, "volume %s does not exist", volumeID)
		}
		st := out.VolumeStatuses[0]
		if s := initializationState(st); s == "" || s == "completed" {
			if s != "" {
				klog.V(2).InfoS("Volume initialized", "volumeID", volumeID, "waited", time.Since(start))
			}
			return nil
		}
		if d := st.InitializationStatusDetails; d != nil {
			klog.V(4).InfoS("Volume initializing", "volumeID", volumeID, "progress", aws.ToInt64(d.Progress),
				"estimatedSeconds", aws.ToInt64(d.EstimatedTimeToCompleteInSeconds))
		}
		if err := ctxsleep.Sleep(ctx, polls.NextBackOff()); err != nil {
			return err
		}
	}
}

// initializationStateDetail names the status detail of a volume's initialization (the SDK has no constant for it).
const initializationStateDetail ec2types.VolumeStatusName = "initialization-state"

// initializationState is the status of a volume status's initialization-state detail, "" without one.
func initializationState(st ec2types.VolumeStatusItem) string {
	if st.VolumeStatus == nil {
		return ""
	}
	for _, d := range st.VolumeStatus.Details {
		if d.Name == initializationStateDetail {
			return aws.ToString(d.Status)
		}
	}
	return ""
}
