//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/test/e2e/cluster"
)

// node is a schedulable node with the driver's node plugin registered.
type node struct {
	Name       string
	Zone       string
	Hostname   string // the kubernetes.io/hostname label pods are pinned with
	InstanceID string // the driver's node ID
	RootDir    string // the kubelet's root directory as the node sees it, symlinks resolved
	// Pid is a process in the node's mount namespace (local cluster); 0: this process's.
	Pid int
}

// run is one execution of the scenarios: clients, the namespace, the nodes, and what a scenario leaves for the
// next ones.
type run struct {
	cfg   *rest.Config
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	cloud *cloudClient // nil: no cloud checks
	host  bool         // host checks on
	ns    string

	nodes  []node
	zoneA  string // a zone with two nodes
	zoneB  string // another zone
	nodesA []node
	nodeB  *node

	mu      sync.Mutex
	pvs     map[string]bool // PVs the run's claims were bound to
	volumes map[string]bool // cloud volume IDs of those PVs
	pods    map[types.UID]bool
	// data is scenario 1's xfs volume, in use by a pod on the zone-b node, holding a data file.
	data *podVolume
	// moved is scenario 2's ext4 volume, in use by a pod on the second zone-a node.
	moved *podVolume
	// noSnapshots says why the cluster cannot take VolumeSnapshots, if it cannot.
	noSnapshots string
	// tornDown is set once scenario 7 has deleted the namespace's objects.
	tornDown bool
	// restarts are the control pods' container restarts when the run began.
	restarts map[string]int32
}

// podVolume is a claim in use by a running pod.
type podVolume struct {
	claim    string
	pv       string
	volumeID string
	pod      *corev1.Pod
	node     node
	fsType   string
	// mount is the pod's volume mount on the host (host checks only).
	mount string
	data  *dataFile
}

var (
	activeMu  sync.Mutex
	activeRun *run
)

// newRun connects to the cluster, finds the nodes, creates the namespace and the run's classes, and registers the
// cleanup that deletes them whatever happens.
func newRun(t *testing.T) *run {
	t.Helper()
	if env.skip != "" {
		if testutil.InCI() {
			t.Fatalf("%s (CI must run the e2e scenarios)", env.skip)
		}
		t.Skip(env.skip)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", env.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	r := &run{cfg: cfg, host: env.hostChecks, pvs: map[string]bool{}, volumes: map[string]bool{}, pods: map[types.UID]bool{}}
	if r.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if r.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if env.cloudURL != "" {
		r.cloud = newCloudClient(env.cloudURL, env.cloud)
	}
	r.discoverNodes(t)
	if r.restarts, _, err = r.containerRestarts(t.Context()); err != nil {
		t.Fatalf("restarts of the control pods' containers: %v", err)
	}

	ns, err := r.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "e2e-diskforge-", Labels: map[string]string{runLabel: "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	r.ns = ns.Name
	activeMu.Lock()
	activeRun = r
	activeMu.Unlock()
	t.Cleanup(func() { r.cleanup(t) })
	t.Logf("namespace %s; nodes %s; zone a %s, zone b %s; cloud checks %s, host checks %s", r.ns, r.nodeList(),
		r.zoneA, r.zoneB, onOff(r.cloud != nil), onOff(r.host))

	r.ensureServiceAccount(t)
	for _, sc := range []*storagev1.StorageClass{
		storageClass(classXFS, r.ns, "xfs"),
		storageClass(classExt4, r.ns, "ext4"),
		storageClass(classZoneA, r.ns, "ext4", r.zoneA),
	} {
		r.replaceStorageClass(t, sc)
	}
	r.replaceSnapshotClass(t)
	return r
}

func (r *run) nodeList() string {
	var s []string
	for _, n := range r.nodes {
		s = append(s, fmt.Sprintf("%s(%s,%s)", n.Name, n.Zone, n.InstanceID))
	}
	return strings.Join(s, " ")
}

// discoverNodes waits for the driver's node plugin to register on the schedulable nodes and picks the zones: zone a
// is a zone with two nodes, zone b another one.
func (r *run) discoverNodes(t *testing.T) {
	t.Helper()
	known := map[string]cluster.NodeInfo{} // local cluster's nodes
	for _, n := range env.nodes {
		known[n.Name] = n
	}
	waitFor(t, "the driver registered on the nodes", func(ctx context.Context) (bool, string, error) {
		nodes, err := r.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		r.nodes = nil
		var missing []string
		for _, n := range nodes.Items {
			if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}) {
				continue
			}
			csiNode, err := r.cs.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, "", err
			}
			id := ""
			if csiNode != nil {
				for _, d := range csiNode.Spec.Drivers {
					if d.Name == driverName {
						id = d.NodeID
					}
				}
			}
			if id == "" || n.Labels[zoneLabel] == "" || !nodeReady(&n) {
				missing = append(missing, n.Name)
				continue
			}
			root, pid := env.kubeletRoot, 0
			if k, ok := known[n.Name]; ok {
				root, pid = k.RootDir, k.Pid
			}
			hostname := n.Labels[hostnameLabel]
			if hostname == "" {
				hostname = n.Name
			}
			r.nodes = append(r.nodes, node{Name: n.Name, Zone: n.Labels[zoneLabel], Hostname: hostname, InstanceID: id,
				RootDir: realPath(root), Pid: pid})
		}
		// The local cluster's nodes must all be there; elsewhere, whatever nodes are ready once one is.
		for name := range known {
			if !slices.ContainsFunc(r.nodes, func(n node) bool { return n.Name == name }) {
				return false, fmt.Sprintf("%d ready with the driver, not yet: %v", len(r.nodes), missing), nil
			}
		}
		return len(r.nodes) > 0, fmt.Sprintf("%d ready with the driver (%s), not: %v", len(r.nodes), r.nodeList(),
			missing), nil
	})
	byZone := map[string][]node{}
	for _, n := range r.nodes {
		byZone[n.Zone] = append(byZone[n.Zone], n)
	}
	zones := make([]string, 0, len(byZone))
	for z := range byZone {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	for _, z := range zones {
		if r.zoneA == "" && len(byZone[z]) >= 2 {
			r.zoneA, r.nodesA = z, byZone[z]
		}
	}
	for _, z := range zones {
		if r.zoneB == "" && z != r.zoneA {
			r.zoneB = z
			r.nodeB = &byZone[z][0]
		}
	}
	sort.Slice(r.nodesA, func(i, j int) bool { return r.nodesA[i].Name < r.nodesA[j].Name })
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// needZones skips a scenario the cluster's topology cannot host.
func (r *run) needZones(t *testing.T, zoneANodes int, zoneB bool) {
	t.Helper()
	if len(r.nodesA) < zoneANodes || (zoneB && r.nodeB == nil) {
		msg := fmt.Sprintf("needs %d nodes in one zone and (%v) a node in another; the cluster has %s", zoneANodes,
			zoneB, r.nodeList())
		if env.local {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// ensureServiceAccount waits for the namespace's default service account, which pods need to be admitted, and
// makes it if the cluster's controller does not.
func (r *run) ensureServiceAccount(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := pollQuiet(ctx, func(ctx context.Context) bool {
		_, err := r.cs.CoreV1().ServiceAccounts(r.ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	if err == nil {
		return
	}
	t.Logf("no default service account in %s after 20s: creating it", r.ns)
	_, err = r.cs.CoreV1().ServiceAccounts(r.ns).Create(t.Context(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the default service account: %v", err)
	}
}

func (r *run) replaceStorageClass(t *testing.T, sc *storagev1.StorageClass) {
	t.Helper()
	ctx := t.Context()
	api := r.cs.StorageV1().StorageClasses()
	if err := api.Delete(ctx, sc.Name, metav1.DeleteOptions{}); err == nil {
		t.Logf("replacing StorageClass %s left by an earlier run", sc.Name)
	} else if !apierrors.IsNotFound(err) {
		t.Fatalf("delete StorageClass %s: %v", sc.Name, err)
	}
	waitFor(t, "StorageClass "+sc.Name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := api.Create(ctx, sc, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // the old one is still being deleted
			return false, "old one still there", nil
		}
		return err == nil, "created", err
	})
}

func (r *run) replaceSnapshotClass(t *testing.T) {
	t.Helper()
	if _, err := r.cs.Discovery().ServerResourcesForGroupVersion(snapshotGroup + "/v1"); err != nil {
		r.noSnapshots = fmt.Sprintf("%s/v1 is not served: %v", snapshotGroup, err)
		t.Log(r.noSnapshots)
		return
	}
	api := r.dyn.Resource(snapshotClasses)
	if err := api.Delete(t.Context(), classSnapshots, metav1.DeleteOptions{}); err == nil {
		t.Logf("replacing VolumeSnapshotClass %s left by an earlier run", classSnapshots)
	} else if !apierrors.IsNotFound(err) {
		t.Fatalf("delete VolumeSnapshotClass %s: %v", classSnapshots, err)
	}
	waitFor(t, "VolumeSnapshotClass "+classSnapshots+" created", func(ctx context.Context) (bool, string, error) {
		_, err := api.Create(ctx, volumeSnapshotClass(classSnapshots, r.ns), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "old one still there", nil
		}
		return err == nil, "created", err
	})
}

// notePV remembers a PV (and its cloud volume) of the run, for the teardown checks.
func (r *run) notePV(pv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pvs[pv] = true
}

func (r *run) noteVolume(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.volumes[id] = true
}

func (r *run) notePod(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[uid] = true
}

// ours reports whether a host path (a mount point, a loop device's backing file) belongs to the run: on the local
// cluster everything below its directories does; on another cluster only what names the run's PVs, pods or
// volumes.
func (r *run) ours(path string) bool {
	if env.local {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for pv := range r.pvs {
		if strings.Contains(path, pv) {
			return true
		}
	}
	for uid := range r.pods {
		if strings.Contains(path, string(uid)) {
			return true
		}
	}
	for id := range r.volumes {
		if strings.Contains(path, id) {
			return true
		}
	}
	return false
}

// scenario runs fn as the subtest name, logs and records its time, and dumps the cluster's state if it failed.
func (r *run) scenario(t *testing.T, name string, fn func(*testing.T, *run)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		start := time.Now()
		t.Cleanup(func() {
			took := time.Since(start)
			res := "ok"
			switch {
			case t.Failed():
				res = "FAIL"
				r.dump(t)
			case t.Skipped():
				res = "skip"
			}
			t.Logf("%s: %s in %s", name, res, took.Round(time.Millisecond))
			recordTiming(name, res, took)
		})
		fn(t, r)
	})
}

// createPod creates a pod of claim pinned to n and waits for it to run.
func (r *run) createPod(t *testing.T, name, claim string, n node, block bool) *corev1.Pod {
	t.Helper()
	p, err := r.cs.CoreV1().Pods(r.ns).Create(t.Context(), pod(name, r.ns, n.Hostname, claim, env.testImage, block), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	r.notePod(p.UID)
	p = r.waitPodRunning(t, name)
	if p.Spec.NodeName != n.Name {
		t.Fatalf("pod %s runs on %s, want %s", name, p.Spec.NodeName, n.Name)
	}
	return p
}

func (r *run) createPVC(t *testing.T, c *corev1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PVC %s: %v", c.Name, err)
	}
}

// cleanup deletes what the run made if scenario 7 did not (a failure, -run), without judging: it logs.
func (r *run) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	if !r.tornDown {
		t.Logf("cleanup: deleting namespace %s", r.ns)
		r.deleteNamespaceObjects(ctx)
		_ = r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{})
		err := pollQuiet(ctx, func(ctx context.Context) bool {
			_, err := r.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if err != nil {
			t.Logf("cleanup: namespace %s still there: %v", r.ns, err)
		}
		err = pollQuiet(ctx, func(ctx context.Context) bool {
			pvs, err := r.runPVs(ctx)
			return err == nil && len(pvs) == 0
		})
		if err != nil {
			t.Logf("cleanup: PVs of the run still there: %v", err)
		}
	}
	r.deleteClasses(ctx)
	activeMu.Lock()
	activeRun = nil
	activeMu.Unlock()
}

// deleteNamespaceObjects deletes the pods, snapshots and claims of the namespace, in the order that lets each go.
func (r *run) deleteNamespaceObjects(ctx context.Context) {
	_ = r.cs.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = r.dyn.Resource(volumeGroupSnapshots).Namespace(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = r.dyn.Resource(volumeSnapshots).Namespace(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = r.cs.CoreV1().PersistentVolumeClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

func (r *run) deleteClasses(ctx context.Context) {
	for _, name := range []string{classXFS, classExt4, classZoneA, classIOPS} {
		_ = r.cs.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{})
	}
	_ = r.dyn.Resource(snapshotClasses).Delete(ctx, classSnapshots, metav1.DeleteOptions{})
	_ = r.dyn.Resource(groupSnapshotClasses).Delete(ctx, classGroupSnapshots, metav1.DeleteOptions{})
	_ = r.cs.StorageV1().VolumeAttributesClasses().Delete(ctx, classTags, metav1.DeleteOptions{})
	_ = r.cs.StorageV1().VolumeAttributesClasses().Delete(ctx, classIOPS, metav1.DeleteOptions{})
}

// abortActiveRun is the signal handler's part: start deleting the run's objects on a cluster that outlives us.
func abortActiveRun() {
	activeMu.Lock()
	r := activeRun
	activeMu.Unlock()
	if r == nil || env.local {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logf("deleting namespace %s and the run's classes", r.ns)
	r.deleteNamespaceObjects(ctx)
	_ = r.cs.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{})
	r.deleteClasses(ctx)
}

func pollQuiet(ctx context.Context, done func(context.Context) bool) error {
	for {
		if done(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// runPVs are the driver's PVs of the run: bound to its namespace's claims, or noted while it ran.
func (r *run) runPVs(ctx context.Context) ([]corev1.PersistentVolume, error) {
	list, err := r.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []corev1.PersistentVolume
	for _, pv := range list.Items {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName {
			continue
		}
		if env.local || r.pvs[pv.Name] || (pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == r.ns) {
			out = append(out, pv)
		}
	}
	return out, nil
}

// runAttachments are the driver's VolumeAttachments of the run's PVs (on the local cluster: all of the driver).
func (r *run) runAttachments(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
	list, err := r.cs.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []storagev1.VolumeAttachment
	for _, va := range list.Items {
		src := va.Spec.Source.PersistentVolumeName
		if va.Spec.Attacher == driverName && (env.local || (src != nil && r.pvs[*src])) {
			out = append(out, va)
		}
	}
	return out, nil
}

// snapshotContentOf returns the VolumeSnapshotContent bound to a snapshot.
func (r *run) snapshotContentOf(ctx context.Context, vs *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	name, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if name == "" {
		return nil, fmt.Errorf("VolumeSnapshot %s has no bound content", vs.GetName())
	}
	return r.dyn.Resource(snapshotContent).Get(ctx, name, metav1.GetOptions{})
}

// controlPods selects the pods whose containers no scenario restarts: the driver's controller and fakecloud (every
// pod of the driver's namespace but the node plugins), and the snapshot-controller.
var controlPods = []struct{ namespace, selector string }{
	{driverNamespace, "app.kubernetes.io/name!=diskforge-node"},
	{"kube-system", "app.kubernetes.io/name=snapshot-controller"},
}

// containerRestarts counts the restarts of the control pods' containers, by namespace/pod/container, with the
// reason of each one's last end.
func (r *run) containerRestarts(ctx context.Context) (map[string]int32, map[string]string, error) {
	counts, reasons := map[string]int32{}, map[string]string{}
	for _, sel := range controlPods {
		pods, err := r.cs.CoreV1().Pods(sel.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.selector})
		if err != nil {
			return nil, nil, err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				key := p.Namespace + "/" + p.Name + "/" + c.Name
				counts[key] = c.RestartCount
				if t := c.LastTerminationState.Terminated; t != nil {
					reasons[key] = fmt.Sprintf("%s, exit %d at %s: %.200s", t.Reason, t.ExitCode, t.FinishedAt.Format(time.TimeOnly), t.Message)
				}
			}
		}
	}
	return counts, reasons, nil
}

// checkNoRestarts fails if a control pod's container restarted since before: a sidecar that lost its leader lease
// (an API server out of reach) or crashed.
func (r *run) checkNoRestarts(t *testing.T, before map[string]int32) {
	t.Helper()
	after, reasons, err := r.containerRestarts(t.Context())
	if err != nil {
		t.Errorf("restarts of the control pods' containers: %v", err)
		return
	}
	for key, n := range after {
		if n > before[key] {
			t.Errorf("container %s restarted %d times during the scenarios; last end: %s", key, n-before[key], reasons[key])
		}
	}
}
