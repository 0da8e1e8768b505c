package nodelife

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
)

// DefaultShutdownPoll is how often a shutdown wait looks at the attachments cache.
const DefaultShutdownPoll = 500 * time.Millisecond

// drainTaints mark a Node being drained, or shut down, or about to be deleted: by kubectl drain (cordon),
// the node lifecycle controller (a kubelet gone not-ready, e.g. in its graceful shutdown, or unreachable), the
// cloud node lifecycle controller (an instance shut down), an operator (non-graceful shutdown), and the cluster
// autoscaler or Karpenter scaling the node in.
var drainTaints = []string{
	corev1.TaintNodeUnschedulable,
	corev1.TaintNodeNotReady,
	corev1.TaintNodeUnreachable,
	corev1.TaintNodeOutOfService,
	"node.cloudprovider.kubernetes.io/shutdown",
	"ToBeDeletedByClusterAutoscaler",
	"karpenter.sh/disrupted",
	"karpenter.sh/disruption",
}

// DrainReason says why node counts as being drained or shut down, or "" when it does not: a DaemonSet restart
// on a schedulable, ready node must not wait for volumes that stay.
func DrainReason(node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "unschedulable"
	}
	for _, t := range node.Spec.Taints {
		if slices.Contains(drainTaints, t.Key) {
			return "taint " + t.Key
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return "not ready"
		}
	}
	return ""
}

// ShutdownOptions configure a Shutdown.
type ShutdownOptions struct {
	Client      kubernetes.Interface
	NodeName    string
	Attachments *Attachments
	// Bound is how long one wait lasts at most: keep it below the pod's terminationGracePeriodSeconds, which
	// holds the wait and the gRPC server's graceful stop after it. 0 means no wait.
	Bound time.Duration
	// Poll is how often the attachments cache is looked at; 0 means DefaultShutdownPoll.
	Poll time.Duration
}

// Shutdown holds the node plugin's exit while its Node is drained or shut down, until kubelet has unstaged the
// Node's volumes and the attach/detach controller has detached them: until the driver's VolumeAttachments on
// the Node are gone. A plugin that exits first leaves kubelet unable to unstage, and the controller then waits
// six minutes before it detaches by force. The CSI server keeps serving meanwhile.
type Shutdown struct {
	opts    ShutdownOptions
	limiter *rate.Limiter

	mu  sync.Mutex
	cur *shutdownRun
	// lastEnd and last are when the last wait ended and what it saw.
	lastEnd time.Time
	last    ShutdownResult
}

type shutdownRun struct {
	done   chan struct{}
	result ShutdownResult
}

// ShutdownResult is what one wait saw.
type ShutdownResult struct {
	// Reason is why the Node counted as drained or shut down; "" when it did not, and the wait ended at once.
	Reason string
	// Waited is how long the wait took.
	Waited time.Duration
	// Remaining is how many of the driver's attachments the Node still held when the wait ended: 0 unless the
	// bound ended it; -1 when not looked at or unknown (the Node not drained or unreadable, the attachments not
	// read yet, or the caller gone first).
	Remaining int
}

// NewShutdown returns the shutdown wait of o.
func NewShutdown(o ShutdownOptions) *Shutdown {
	if o.Poll <= 0 {
		o.Poll = DefaultShutdownPoll
	}
	// The preStop hook calls once; anyone else in the cluster who can reach the port gets no more than this.
	return &Shutdown{opts: o, limiter: rate.NewLimiter(1, 5)}
}

// Wait returns once the Node holds none of the driver's VolumeAttachments, when the Node is being drained or
// shut down, or at once when it is not (or cannot be read); Bound ends it in any case. Calls that overlap
// share one wait; ctx ends the caller's part of it only.
func (s *Shutdown) Wait(ctx context.Context) ShutdownResult {
	s.mu.Lock()
	r := s.cur
	if r == nil {
		r = &shutdownRun{done: make(chan struct{})}
		s.cur = r
		go func() {
			r.result = s.wait()
			s.mu.Lock()
			s.cur, s.lastEnd, s.last = nil, time.Now(), r.result
			s.mu.Unlock()
			close(r.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.result
	case <-ctx.Done():
		return ShutdownResult{Remaining: -1}
	}
}

// WaitAtExit is the wait on SIGTERM. kubelet sends it once the preStop hooks have returned, within the same
// grace period: when a wait ended less than Bound ago (the hooks'), it returns that wait's result at once rather
// than spend the time left, which the gRPC server's graceful stop needs. Without hooks it is Wait.
func (s *Shutdown) WaitAtExit(ctx context.Context) ShutdownResult {
	s.mu.Lock()
	recent := s.cur == nil && !s.lastEnd.IsZero() && time.Since(s.lastEnd) < s.opts.Bound
	last := s.last
	s.mu.Unlock()
	if recent {
		klog.InfoS("The preStop hook's shutdown wait has run; stopping", "node", s.opts.NodeName, "reason", last.Reason,
			"remaining", last.Remaining, "waited", last.Waited)
		return last
	}
	return s.Wait(ctx)
}

func (s *Shutdown) wait() ShutdownResult {
	start := time.Now()
	if s.opts.Bound <= 0 {
		return ShutdownResult{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Bound)
	defer cancel()
	node, err := s.opts.Client.CoreV1().Nodes().Get(ctx, s.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		klog.ErrorS(err, "Could not read the Node at shutdown; stopping without waiting for its volumes", "node", s.opts.NodeName)
		return ShutdownResult{Waited: time.Since(start), Remaining: -1}
	}
	reason := DrainReason(node)
	if reason == "" {
		klog.InfoS("The Node is not being drained or shut down; stopping at once", "node", s.opts.NodeName)
		return ShutdownResult{Waited: time.Since(start), Remaining: -1}
	}
	res := ShutdownResult{Reason: reason, Remaining: -1}
	last := -1
	for {
		vas, synced := s.opts.Attachments.List()
		if synced {
			res.Remaining = len(vas)
			if len(vas) == 0 {
				res.Waited = time.Since(start)
				klog.InfoS("The Node holds none of the driver's volume attachments; stopping", "node", s.opts.NodeName,
					"reason", reason, "waited", res.Waited)
				return res
			}
			if len(vas) != last {
				klog.InfoS("The Node is being drained or shut down; serving until its volumes are detached", "node", s.opts.NodeName,
					"reason", reason, "attachments", len(vas), "volumes", volumeNames(vas), "bound", s.opts.Bound)
				last = len(vas)
			}
		}
		if ctxsleep.Sleep(ctx, s.opts.Poll) != nil {
			res.Waited = time.Since(start)
			klog.InfoS("Stopped waiting for the Node's volumes to be detached: the bound passed", "node", s.opts.NodeName,
				"reason", reason, "remaining", res.Remaining, "synced", synced, "waited", res.Waited)
			return res
		}
	}
}

// volumeNames names the volumes of attachments for the log, at most ten.
func volumeNames(vas []*storagev1.VolumeAttachment) []string {
	var names []string
	for _, va := range vas[:min(len(vas), 10)] {
		name := va.Name
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil {
			name = *pv
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Handler serves Wait to a preStop hook: a GET returns when the wait ends. The node-driver-registrar's preStop
// hook calls it, so that the plugin stays registered with kubelet (which unstages through that registration)
// for as long as the driver waits.
func (s *Shutdown) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !s.limiter.Allow() {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		res := s.Wait(r.Context())
		_, _ = fmt.Fprintf(w, "waited %s; reason %q; attachments left %d\n", res.Waited.Round(time.Millisecond), res.Reason, res.Remaining)
	})
}
