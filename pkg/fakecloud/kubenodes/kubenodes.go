// Package kubenodes makes every Node of a Kubernetes cluster an instance of fakecloud, so that fakecloud run
// inside a cluster needs no list of instances: a Node that appears is registered, one that goes is terminated.
//
// Invariants a reader can check against the code:
//   - One worker takes Node names off a workqueue, one at a time, so the record of registered Nodes (known)
//     and the zone counts taken from it need no lock; a Node's events while it waits collapse into one sync.
//   - An instance's identity comes from the Node first (the instance-id label, then an aws:/// provider ID;
//     the zone labels, then the provider ID's zone; the instance-type labels), then from the instance fakecloud
//     already holds under that ID (a restart), and only then is made up: the ID from a hash of the Node's UID,
//     the zone with fewest registered nodes among the configured ones (ties to the first listed), the default
//     type. What was made up is written back to the Node as labels, never changing a label already there.
//   - Registering an instance that is alive leaves it as it is (state.RegisterInstance), so a restart, which
//     lists every Node again, duplicates nothing.
package kubenodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
	"github.com/diskforge/diskforge/pkg/instancetypes"
	"github.com/diskforge/diskforge/pkg/topology"
)

// DefaultZones are the zones Nodes that name none are spread over, unless Options say others.
func DefaultZones() []string { return []string{"us-east-1a", "us-east-1b"} }

// DefaultInstanceType is the type of a Node that names none.
const DefaultInstanceType = instancetypes.Default

// maxRetries bounds how often one Node's registration is retried before the controller waits for its next
// change: an unknown zone or type does not heal by retrying.
const maxRetries = 8

// listWarning is how long the first list of Nodes may take before Run says it is waiting.
const listWarning = 30 * time.Second

// Cloud is what the controller needs of fakecloud's state (*state.State).
type Cloud interface {
	Zones() []state.Zone
	RegisterInstance(state.InstanceSpec) (state.Instance, error)
	TerminateInstances(ids []string, force, dryRun bool) ([]state.InstanceStateChange, error)
	DescribeInstances(state.DescribeInput) ([]state.InstanceView, string, error)
}

// Options shape the controller.
type Options struct {
	// Zones receive the Nodes that name no zone, spread evenly; empty means DefaultZones.
	Zones []string
	// InstanceType is the type of Nodes that name none; empty means DefaultInstanceType.
	InstanceType string
}

// Controller registers Nodes as instances.
type Controller struct {
	client  kubernetes.Interface
	cloud   Cloud
	opts    Options
	factory informers.SharedInformerFactory
	lister  corelisters.NodeLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	known   map[string]registered
}

// registered is a Node the controller made an instance of.
type registered struct {
	uid        types.UID
	instanceID string
	zone       string
}

// New checks the options against the cloud and builds a controller; Run starts it.
func New(client kubernetes.Interface, cloud Cloud, opts Options) (*Controller, error) {
	if len(opts.Zones) == 0 {
		opts.Zones = DefaultZones()
	}
	if opts.InstanceType == "" {
		opts.InstanceType = DefaultInstanceType
	}
	var offered []string
	for _, z := range cloud.Zones() {
		offered = append(offered, z.Name)
	}
	for _, z := range opts.Zones {
		if !slices.Contains(offered, z) {
			return nil, fmt.Errorf("kube nodes: zone %q is not one of the cloud's zones %v", z, offered)
		}
	}
	if _, ok := instancetypes.Lookup(opts.InstanceType); !ok {
		return nil, fmt.Errorf("kube nodes: unknown instance type %q", opts.InstanceType)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	c := &Controller{client: client, cloud: cloud, opts: opts, factory: factory,
		lister: nodes.Lister(), synced: nodes.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubenodes"}),
		known: map[string]registered{}}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("kube nodes: %w", err)
	}
	return c, nil
}

// Run watches Nodes until ctx ends. An API server out of reach delays the registrations, and the informer
// logs why; the EC2 API serves meanwhile.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	// The informer stops with ctx on its own; Run does not wait for it (factory.Shutdown), as a reflector
	// backing off from an unreachable API server ends its wait, up to a minute, before it looks at ctx.
	c.factory.Start(ctx.Done())
	// The informer's own retries log only at higher verbosity.
	slow := time.AfterFunc(listWarning, func() {
		klog.ErrorS(nil, "The Nodes are not listed yet: is the API server reachable, and may fakecloud list and watch nodes?")
	})
	synced := cache.WaitForCacheSync(ctx.Done(), c.synced)
	slow.Stop()
	if !synced {
		return
	}
	klog.InfoS("Registering Kubernetes Nodes as instances", "zones", c.opts.Zones, "defaultInstanceType", c.opts.InstanceType)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	err := c.sync(ctx, name)
	switch {
	case err == nil:
		c.queue.Forget(name)
	case c.queue.NumRequeues(name) < maxRetries:
		klog.ErrorS(err, "Registering Node as an instance failed; retrying", "node", name)
		c.queue.AddRateLimited(name)
	default:
		klog.ErrorS(err, "Registering Node as an instance failed; waiting for the Node to change", "node", name)
		c.queue.Forget(name)
	}
	return true
}

// sync makes the instance of one Node match it: registered while the Node exists, terminated once it is gone
// (or replaced by another Node of the same name).
func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return c.forget(name)
	}
	if err != nil {
		return err
	}
	if old, ok := c.known[name]; ok && old.uid != node.UID {
		if err := c.forget(name); err != nil {
			return err
		}
	}
	spec, labels, err := c.identity(node)
	if err != nil {
		return err
	}
	if old, ok := c.known[name]; !ok || old.instanceID != spec.ID || old.zone != spec.Zone {
		in, err := c.cloud.RegisterInstance(spec)
		if err != nil {
			return fmt.Errorf("register instance %s of node %s: %w", spec.ID, name, err)
		}
		c.known[name] = registered{uid: node.UID, instanceID: in.ID, zone: in.Zone}
		klog.InfoS("Node is an instance", "node", name, "instanceID", in.ID, "zone", in.Zone, "instanceType", in.InstanceType, "state", in.State)
	}
	if len(labels) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s: %w", name, err)
	}
	return nil
}

// forget terminates the instance of a Node that is gone; its volumes detach, and those marked
// DeleteOnTermination are deleted, as TerminateInstances does.
func (c *Controller) forget(name string) error {
	old, ok := c.known[name]
	if !ok {
		return nil
	}
	if _, err := c.cloud.TerminateInstances([]string{old.instanceID}, false, false); err != nil &&
		!ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound) {
		return fmt.Errorf("terminate instance %s of deleted node %s: %w", old.instanceID, name, err)
	}
	delete(c.known, name)
	klog.InfoS("Node is gone: instance terminated", "node", name, "instanceID", old.instanceID)
	return nil
}

// identity is the instance a Node stands for, and the labels to add to the Node for what it did not say.
func (c *Controller) identity(node *corev1.Node) (state.InstanceSpec, map[string]string, error) {
	providerZone, providerID := parseProviderID(node.Spec.ProviderID)
	spec := state.InstanceSpec{
		ID:           firstOf(node.Labels[topology.InstanceIDLabel], providerID),
		Zone:         firstOf(node.Labels[topology.WellKnownZoneKey], node.Labels[topology.ZoneKey], providerZone),
		InstanceType: firstOf(node.Labels[topology.InstanceTypeLabel], node.Labels[topology.BetaInstanceTypeLabel]),
	}
	if spec.ID == "" {
		spec.ID = InstanceID(node)
	}
	if spec.Zone == "" || spec.InstanceType == "" {
		existing, err := c.existing(spec.ID)
		if err != nil {
			return spec, nil, err
		}
		spec.Zone = firstOf(spec.Zone, existing.Zone, c.emptiestZone())
		spec.InstanceType = firstOf(spec.InstanceType, existing.InstanceType, c.opts.InstanceType)
	}
	labels := map[string]string{}
	for key, value := range map[string]string{topology.InstanceIDLabel: spec.ID, topology.WellKnownZoneKey: spec.Zone,
		topology.InstanceTypeLabel: spec.InstanceType} {
		if node.Labels[key] == "" {
			labels[key] = value
		}
	}
	return spec, labels, nil
}

// existing is the instance fakecloud holds under id, or the zero Instance.
func (c *Controller) existing(id string) (state.Instance, error) {
	views, _, err := c.cloud.DescribeInstances(state.DescribeInput{IDs: []string{id}})
	switch {
	case ec2err.HasCode(err, ec2err.CodeInvalidInstanceIDNotFound):
		return state.Instance{}, nil
	case err != nil:
		return state.Instance{}, fmt.Errorf("describe instance %s: %w", id, err)
	case len(views) == 0:
		return state.Instance{}, nil
	}
	return views[0].Instance, nil
}

// emptiestZone is the configured zone holding the fewest registered Nodes, the first listed among equals.
func (c *Controller) emptiestZone() string {
	counts := map[string]int{}
	for _, r := range c.known {
		counts[r.zone]++
	}
	best := c.opts.Zones[0]
	for _, z := range c.opts.Zones[1:] {
		if counts[z] < counts[best] {
			best = z
		}
	}
	return best
}

// InstanceID is the instance ID made up for a Node that carries none: i- and 17 hex digits of a hash of its
// UID (of its name when it has no UID), so a Node keeps its ID across restarts and a new Node of the same name
// is a new instance.
func InstanceID(node *corev1.Node) string {
	key := firstOf(string(node.UID), node.Name)
	sum := sha256.Sum256([]byte(key))
	return "i-" + hex.EncodeToString(sum[:])[:17]
}

// parseProviderID reads aws:///ZONE/INSTANCE (or aws://ZONE/INSTANCE); any other provider ID, such as
// kind's, names no instance.
func parseProviderID(id string) (zone, instanceID string) {
	rest, ok := strings.CutPrefix(id, "aws://")
	if !ok {
		return "", ""
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	last := parts[len(parts)-1]
	if !strings.HasPrefix(last, "i-") {
		return "", ""
	}
	if len(parts) > 1 {
		zone = parts[len(parts)-2]
	}
	return zone, last
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
