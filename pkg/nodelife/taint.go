package nodelife

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
)

// StartupTaintKey is the taint a node pool puts on its nodes when they register (kubelet's
// --register-with-taints, or the node group's taints), so that no pod with one of the driver's volumes is
// scheduled there before the node plugin serves. The plugin removes it, whatever its effect.
const StartupTaintKey = "disk.csi.diskforge.io/agent-not-ready"

// Defaults of StartupTaint.
const (
	DefaultRegistrationPoll = 500 * time.Millisecond
	DefaultRetryInitial     = 200 * time.Millisecond
	DefaultRetryMax         = 10 * time.Second
)

// StartupTaint removes the startup taint from the plugin's own Node: once kubelet has registered the plugin
// (Run), then whenever a node manager puts it back while the plugin serves (Keep).
type StartupTaint struct {
	Client     kubernetes.Interface
	NodeName   string
	DriverName string
	// Key is the taint's key; empty means StartupTaintKey.
	Key string
	// RegistrationPoll is how often the CSINode is read until it lists the driver; RetryInitial and RetryMax
	// bound the doubling delay between failed reads and patches. Zero values mean the defaults.
	RegistrationPoll, RetryInitial, RetryMax time.Duration
}

// Run removes the startup taint once kubelet has registered the driver on the node (its CSINode lists the
// driver), and returns how long that took from the registration seen. Call it once the plugin serves its CSI
// socket: a CSINode can list the driver from an earlier run of the plugin. The Node is read only after the
// registration, so a taint put on while the plugin starts is removed here too, and never before kubelet knows
// the plugin. Every failure (the API server down, a conflicting update, RBAC refusing the read or the patch) is
// logged and retried with backoff until it succeeds or ctx ends; it never gives up on its own.
func (s *StartupTaint) Run(ctx context.Context) (time.Duration, error) {
	s.defaults()
	registered, err := s.waitRegistered(ctx)
	if err != nil {
		return 0, err
	}
	retry := backoff{next: s.RetryInitial, limit: s.RetryMax}
	for attempt := 1; ; attempt++ {
		removed, err := s.removeOnce(ctx)
		if err == nil {
			took := time.Since(registered)
			if removed {
				klog.InfoS("Startup taint removed", "node", s.NodeName, "taint", s.Key, "afterRegistration", took,
					"afterRegistrationSeconds", took.Seconds(), "attempts", attempt)
			} else {
				klog.InfoS("No startup taint on the Node", "node", s.NodeName, "taint", s.Key)
			}
			return took, nil
		}
		s.logFailure(err, "remove the startup taint")
		if ctxsleep.Sleep(ctx, retry.delay()) != nil {
			return 0, ctx.Err()
		}
	}
}

// Serve is Run, then Keep, until ctx ends: the plugin's whole part in the startup taint. End ctx when the
// plugin begins to shut down, so that a taint put back then stays.
func (s *StartupTaint) Serve(ctx context.Context) error {
	if _, err := s.Run(ctx); err != nil {
		return err
	}
	return s.Keep(ctx)
}

// Keep watches the Node (one object, by a field selector on its name) and removes the startup taint whenever it
// is on the Node, until ctx ends: node managers put it back on a Node that is already serving (a node pool's
// taints applied again on update, a node's registration replayed), and a taint that stays keeps every pod with
// one of the driver's volumes off the node. It leaves the taint on a Node being drained or shut down
// (DrainReason), where nothing is to be scheduled, and removes it once the Node is back in service. Call it
// after Run: kubelet has registered the plugin by then. Failures are logged and retried with backoff; the watch
// itself is retried by the informer.
func (s *StartupTaint) Keep(ctx context.Context) error {
	s.defaults()
	inf := coreinformers.NewFilteredNodeInformer(s.Client, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.NodeName).String()
	})
	_ = inf.SetTransform(withoutManagedFields[corev1.Node])
	changed := make(chan struct{}, 1)
	notify := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == s.NodeName && hasTaint(n, s.Key) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	klog.InfoS("Watching the Node for the startup taint coming back", "node", s.NodeName, "taint", s.Key)
	retry := backoff{next: s.RetryInitial, limit: s.RetryMax}
	var again <-chan time.Time // a failed removal is tried again without waiting for the Node to change
	left := ""                 // why the taint was last left on the Node, so that it is logged once
	for {
		select {
		case <-ctx.Done():
			klog.InfoS("Stopped watching the Node for the startup taint", "node", s.NodeName, "taint", s.Key)
			return ctx.Err()
		case <-changed:
		case <-again:
		}
		again = nil
		obj, ok, err := inf.GetStore().GetByKey(s.NodeName)
		node, isNode := obj.(*corev1.Node)
		if err != nil || !ok || !isNode || !hasTaint(node, s.Key) {
			continue
		}
		if reason := DrainReason(node); reason != "" {
			if reason != left {
				klog.InfoS("The startup taint is on a Node being drained or shut down; leaving it", "node", s.NodeName,
					"taint", s.Key, "reason", reason)
				left = reason
			}
			continue
		}
		left = ""
		removed, err := s.removeOnce(ctx)
		switch {
		case err != nil:
			s.logFailure(err, "remove the startup taint put back on the Node")
			again = time.After(retry.delay())
		case removed:
			klog.InfoS("Startup taint put back on the Node; removed it again", "node", s.NodeName, "taint", s.Key)
			retry = backoff{next: s.RetryInitial, limit: s.RetryMax}
		}
	}
}

func (s *StartupTaint) defaults() {
	if s.Key == "" {
		s.Key = StartupTaintKey
	}
	if s.RegistrationPoll <= 0 {
		s.RegistrationPoll = DefaultRegistrationPoll
	}
	if s.RetryInitial <= 0 {
		s.RetryInitial = DefaultRetryInitial
	}
	if s.RetryMax <= 0 {
		s.RetryMax = DefaultRetryMax
	}
}

// waitRegistered polls the node's CSINode until it lists the driver, and returns when it first did. A poll
// rather than a watch: it needs only get, and it lasts the seconds kubelet takes to register the plugin.
func (s *StartupTaint) waitRegistered(ctx context.Context) (time.Time, error) {
	retry := backoff{next: s.RetryInitial, limit: s.RetryMax}
	for logged := false; ; {
		csiNode, err := s.Client.StorageV1().CSINodes().Get(ctx, s.NodeName, metav1.GetOptions{})
		wait := s.RegistrationPoll
		switch {
		case err == nil && slices.ContainsFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == s.DriverName }):
			klog.InfoS("Kubelet has registered the driver on the Node", "node", s.NodeName, "driver", s.DriverName)
			return time.Now(), nil
		case err == nil || apierrors.IsNotFound(err):
			if !logged {
				klog.InfoS("Waiting for kubelet to register the driver before removing the startup taint", "node", s.NodeName,
					"driver", s.DriverName, "taint", s.Key)
				logged = true
			}
		default:
			s.logFailure(err, "read the CSINode")
			wait = retry.delay()
		}
		if ctxsleep.Sleep(ctx, wait) != nil {
			return time.Time{}, ctx.Err()
		}
	}
}

// removeOnce removes every taint with the key from the Node in one JSON patch that first tests the taint list
// it read: a concurrent change of the taints fails the test, and the next attempt starts from the new list, so
// no other taint is ever lost. removed is false when the taint was already gone.
func (s *StartupTaint) removeOnce(ctx context.Context) (removed bool, err error) {
	node, err := s.Client.CoreV1().Nodes().Get(ctx, s.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read the Node: %w", err)
	}
	if !hasTaint(node, s.Key) {
		return false, nil
	}
	keep := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == s.Key })
	if keep == nil {
		keep = []corev1.Taint{}
	}
	patch, err := json.Marshal([]jsonPatchOp{
		{Op: "test", Path: "/spec/taints", Value: node.Spec.Taints},
		{Op: "replace", Path: "/spec/taints", Value: keep},
	})
	if err != nil {
		return false, err
	}
	if _, err := s.Client.CoreV1().Nodes().Patch(ctx, s.NodeName, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("patch the Node's taints: %w", err)
	}
	return true, nil
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// logFailure says what failed, and for a refusal by RBAC what to grant: the plugin keeps retrying, and the
// log is where an operator sees why the taint stays.
func (s *StartupTaint) logFailure(err error, what string) {
	switch {
	case apierrors.IsForbidden(err):
		klog.ErrorS(err, "Not allowed to "+what+"; the node plugin's ServiceAccount needs get, list, watch and patch on nodes and get on csinodes (see its ClusterRole). Retrying",
			"node", s.NodeName, "taint", s.Key)
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		// A failed test operation comes back as 422: the taints changed since they were read.
		klog.InfoS("The Node changed while removing the startup taint; retrying", "node", s.NodeName, "err", err)
	case errors.Is(err, context.Canceled):
	default:
		klog.ErrorS(err, "Could not "+what+"; retrying", "node", s.NodeName, "taint", s.Key)
	}
}
