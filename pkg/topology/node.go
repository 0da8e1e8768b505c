package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// NodeIdentity is who a node is to the cloud: its instance ID, zone and instance type, and how many volumes not
// the driver's the instance had when it last started (they take attachment slots the driver cannot use).
type NodeIdentity struct {
	InstanceID   string
	Zone         string
	InstanceType string
	BootVolumes  int
}

// complete reports whether every field a source can tell is known.
func (id NodeIdentity) complete() bool {
	return id.InstanceID != "" && id.Zone != "" && id.InstanceType != ""
}

// ErrUnknownIdentity means no source told the node's instance ID or zone.
var ErrUnknownIdentity = errors.New("node identity unknown")

// InstanceIDLabel is a Node label that may carry the instance ID when the provider ID does not.
const InstanceIDLabel = "node.diskforge.io/instance-id"

// Well-known Node labels of the instance type, current and deprecated.
const (
	InstanceTypeLabel     = "node.kubernetes.io/instance-type"
	BetaInstanceTypeLabel = "beta.kubernetes.io/instance-type"
)

// NodeLabels reads a node's identity from its Kubernetes Node object: the instance ID from the provider ID
// (aws:///ZONE/INSTANCE, or the last path element of any provider ID) or the InstanceIDLabel, the zone from the
// well-known zone label or the driver's own, the instance type from the well-known label.
func NodeLabels(ctx context.Context, client kubernetes.Interface, nodeName string) (NodeIdentity, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return NodeIdentity{}, fmt.Errorf("read node %s: %w", nodeName, err)
	}
	return nodeIdentity(node), nil
}

func nodeIdentity(node *corev1.Node) NodeIdentity {
	id := NodeIdentity{InstanceID: node.Labels[InstanceIDLabel], Zone: node.Labels[WellKnownZoneKey]}
	if id.InstanceID == "" && node.Spec.ProviderID != "" {
		parts := strings.Split(node.Spec.ProviderID, "/")
		id.InstanceID = parts[len(parts)-1]
	}
	if id.Zone == "" {
		id.Zone = node.Labels[ZoneKey]
	}
	id.InstanceType = node.Labels[InstanceTypeLabel]
	if id.InstanceType == "" {
		id.InstanceType = node.Labels[BetaInstanceTypeLabel]
	}
	return id
}

// Resolve completes explicit identity (flags, environment) from fallback sources in order, stopping once every
// field is known. Instance ID and zone are required; an unknown instance type is left empty.
func Resolve(ctx context.Context, explicit NodeIdentity, fallbacks ...func(context.Context) (NodeIdentity, error)) (NodeIdentity, error) {
	id := explicit
	var errs []error
	for _, fb := range fallbacks {
		if id.complete() {
			break
		}
		got, err := fb(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if id.InstanceID == "" {
			id.InstanceID = got.InstanceID
		}
		if id.Zone == "" {
			id.Zone = got.Zone
		}
		if id.InstanceType == "" {
			id.InstanceType, id.BootVolumes = got.InstanceType, got.BootVolumes
		}
	}
	if id.InstanceID == "" || id.Zone == "" {
		return id, fmt.Errorf("%w (instance %q, zone %q): %w", ErrUnknownIdentity, id.InstanceID, id.Zone, errors.Join(errs...))
	}
	return id, nil
}

// WaitNodeLabels reads the node's identity as NodeLabels does, once the Node names its instance as fakecloud's
// kube-nodes mode leaves it (the InstanceIDLabel, or an aws:// provider ID) and its zone; until then it reads the
// Node again every interval. Other provider IDs (kind's) name no instance here: fakecloud labels such a Node
// with an ID of its own. It returns the last error, or what was missing, once ctx ends.
func WaitNodeLabels(ctx context.Context, client kubernetes.Interface, nodeName string, interval time.Duration) (NodeIdentity, error) {
	logged := false
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			err = fmt.Errorf("read node %s: %w", nodeName, err)
		} else if id := nodeIdentity(node); id.Zone != "" &&
			(node.Labels[InstanceIDLabel] != "" || strings.HasPrefix(node.Spec.ProviderID, "aws://")) {
			return id, nil
		} else {
			err = fmt.Errorf("node %s has no %s label (nor an aws:// provider ID) and zone yet", nodeName, InstanceIDLabel)
		}
		if !logged {
			klog.InfoS("Waiting for the Node to name its instance and zone", "node", nodeName, "reason", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return NodeIdentity{}, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(interval):
		}
	}
}
