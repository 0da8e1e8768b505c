package topology

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// FromIMDS reads a node's identity from the EC2 instance metadata service (IMDSv2) at endpoint, or at the SDK's
// default address when endpoint is empty: instance ID, zone and type from the identity document, and the
// volumes of launch from the block device mappings (every ebsN entry; the root volume is not counted, as the
// instance type's volume limit already leaves its slot out). It needs no cloud credentials.
func FromIMDS(ctx context.Context, endpoint string) (NodeIdentity, error) {
	client := imds.New(imds.Options{Endpoint: endpoint})
	doc, err := client.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		return NodeIdentity{}, fmt.Errorf("instance metadata: identity document: %w", err)
	}
	id := NodeIdentity{InstanceID: doc.InstanceID, Zone: doc.AvailabilityZone, InstanceType: doc.InstanceType}
	out, err := client.GetMetadata(ctx, &imds.GetMetadataInput{Path: "block-device-mapping/"})
	if err != nil {
		return NodeIdentity{}, fmt.Errorf("instance metadata: block device mappings: %w", err)
	}
	defer out.Content.Close()
	names, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return NodeIdentity{}, fmt.Errorf("instance metadata: block device mappings: %w", err)
	}
	for _, name := range strings.Fields(string(names)) {
		if strings.HasPrefix(name, "ebs") {
			id.BootVolumes++
		}
	}
	return id, nil
}
