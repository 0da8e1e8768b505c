package topology

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// maxMappings bounds the block device mappings read: more entries than any instance type has slots means the
// answer is not an instance's, and each entry costs a request.
const maxMappings = 256

// Metadata reads the EC2 instance metadata service (IMDSv2) through one client, whose session token is reused
// from call to call. It needs no cloud credentials.
type Metadata struct {
	client *imds.Client
}

// NewMetadata reads the metadata service at endpoint, or at the SDK's default address when endpoint is empty.
func NewMetadata(endpoint string) *Metadata {
	return &Metadata{client: imds.New(imds.Options{Endpoint: endpoint})}
}

// FromIMDS reads a node's identity from the metadata service at endpoint (see Metadata.Identity).
func FromIMDS(ctx context.Context, endpoint string) (NodeIdentity, error) {
	return NewMetadata(endpoint).Identity(ctx)
}

// Identity is the instance's identity: instance ID, zone and type from the identity document, and the volumes
// the block device mappings list that are not the driver's (ForeignVolumes; the instance type's volume limit
// already leaves the root volume's slot out). EC2 lists there the volumes attached when the instance last
// started, so the driver's own volumes of before a stop and start are among them, and do not count.
func (m *Metadata) Identity(ctx context.Context) (NodeIdentity, error) {
	doc, err := m.client.GetInstanceIdentityDocument(ctx, &imds.GetInstanceIdentityDocumentInput{})
	if err != nil {
		return NodeIdentity{}, fmt.Errorf("instance metadata: identity document: %w", err)
	}
	id := NodeIdentity{InstanceID: doc.InstanceID, Zone: doc.AvailabilityZone, InstanceType: doc.InstanceType}
	devices, err := m.AttachedVolumes(ctx)
	if err != nil {
		return NodeIdentity{}, err
	}
	id.BootVolumes = ForeignVolumes(devices, nil)
	return id, nil
}

// AttachedVolumes is the device names of the instance's EBS volumes besides its root volume, as the block
// device mappings give them (e.g. "sdf" or "xvdba"): on EC2, and in fakecloud, the volumes attached when the
// instance last started, whether still attached or not; volumes attached since are missing.
func (m *Metadata) AttachedVolumes(ctx context.Context) ([]string, error) {
	names, err := m.ebsMappings(ctx)
	if err != nil {
		return nil, err
	}
	devices := make([]string, 0, len(names))
	for _, name := range names {
		dev, err := m.get(ctx, "block-device-mapping/"+name)
		if err != nil {
			return nil, err
		}
		devices = append(devices, strings.TrimSpace(dev))
	}
	return devices, nil
}

// NetworkInterfaces counts the network interfaces attached to the instance now: one entry a MAC address under
// network/interfaces/macs/. Unlike the block device mappings this list follows attachments as they happen, so
// an interface a CNI plugin adds later counts from then on.
func (m *Metadata) NetworkInterfaces(ctx context.Context) (int, error) {
	list, err := m.get(ctx, "network/interfaces/macs/")
	if err != nil {
		return 0, err
	}
	n := len(strings.Fields(list))
	if n > maxMappings {
		return 0, fmt.Errorf("instance metadata: network interfaces: %d entries, more than any instance holds", n)
	}
	return n, nil
}

// ebsMappings lists the ebsN entries of the block device mappings.
func (m *Metadata) ebsMappings(ctx context.Context) ([]string, error) {
	list, err := m.get(ctx, "block-device-mapping/")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Fields(list) {
		if strings.HasPrefix(name, "ebs") {
			names = append(names, name)
		}
	}
	if len(names) > maxMappings {
		return nil, fmt.Errorf("instance metadata: block device mappings: %d ebs entries, more than any instance holds", len(names))
	}
	return names, nil
}

// get reads one metadata path (under meta-data/), at most 64 KiB of it.
func (m *Metadata) get(ctx context.Context, path string) (string, error) {
	out, err := m.client.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("instance metadata: %s: %w", path, err)
	}
	defer out.Content.Close()
	body, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return "", fmt.Errorf("instance metadata: %s: %w", path, err)
	}
	return string(body), nil
}
