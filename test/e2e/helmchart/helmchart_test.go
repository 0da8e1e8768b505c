// Package helmchart checks charts/diskforge against deploy/kustomize: rendered with the values of
// charts/diskforge/ci/<overlay>-values.yaml, the chart gives the same objects as `kustomize build` of the
// overlay, field for field, once the differences that are deliberate are taken out (normalise*). It also
// checks that the chart's own knobs (values the overlays do not set) land where they should, which add-ons
// the switches render, and that values which cannot work are refused with a reason.
//
// It runs helm (built by hack/build-e2e-tools.sh into .cache/e2e-bin; $HELM overrides) and kustomize's
// library, the one kubectl kustomize runs. `make manifests` runs it.
package helmchart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/diskforge/diskforge/internal/testutil"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "charts/diskforge"
	release   = "diskforge"
	namespace = "diskforge-system"
)

// obj is one decoded Kubernetes object.
type obj = map[string]any

func TestChartMatchesOverlay(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	// The chart's crds/ are what the kind overlay applies; the provider overlay leaves the snapshot CRDs to the
	// cluster (helm install skips those already there, and --skip-crds all of them).
	for _, tc := range []struct {
		overlay string
		crds    bool
	}{{"kind", true}, {"provider", false}} {
		overlay := tc.overlay
		t.Run(overlay, func(t *testing.T) {
			want := byKey(t, normaliseKustomize(kustomizeBuild(t, filepath.Join(root, "deploy/kustomize/overlays", overlay))))
			// Its tests are hooks of helm test, not part of the install.
			args := []string{"--skip-tests", "-f", filepath.Join(root, chartDir, "ci", overlay+"-values.yaml")}
			if tc.crds {
				args = append(args, "--include-crds")
			}
			got := byKey(t, normaliseHelm(t, helmTemplate(t, helm, root, args...)))
			for _, k := range sortedKeys(want) {
				if _, ok := got[k]; !ok {
					t.Errorf("%s: in the overlay, not in the chart", k)
				}
			}
			for _, k := range sortedKeys(got) {
				w, ok := want[k]
				if !ok {
					t.Errorf("%s: in the chart, not in the overlay", k)
					continue
				}
				for _, d := range diff("", w, got[k]) {
					t.Errorf("%s: %s", k, d)
				}
			}
			t.Logf("%d objects compared: %s", len(want), strings.Join(sortedKeys(want), ", "))
		})
	}
}

// TestChartValues checks the values that neither overlay sets.
func TestChartValues(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	tests := []struct {
		name  string
		set   []string
		kind  string // the object checked, by kind/name
		objNm string
		want  map[string]any // path (dotted; [name] selects a list item by name) -> value
	}{
		{
			name: "sidecar tuning flags",
			set: []string{
				"sidecars.provisioner.workerThreads=20", "sidecars.resizer.workerThreads=5",
				"sidecars.leaderElection.leaseDuration=30s", "sidecars.attacher.extraArgs={--reconcile-sync=2m}",
				"sidecars.snapshotter.timeout=5m", "controller.replicas=3",
			},
			kind: "Deployment", objNm: "diskforge-controller",
			want: map[string]any{
				"spec.replicas": 3.0,
				"spec.template.spec.containers[csi-provisioner].args": []any{
					"--csi-address=/csi/csi.sock", "--v=2", "--timeout=60s", "--extra-create-metadata",
					"--feature-gates=Topology=true", "--default-fstype=ext4", "--leader-election=true",
					"--leader-election-namespace=" + namespace, "--http-endpoint=:8080",
					"--leader-election-lease-duration=30s", "--worker-threads=20",
				},
				"spec.template.spec.containers[csi-resizer].args[8]":     "--leader-election-lease-duration=30s",
				"spec.template.spec.containers[csi-resizer].args[9]":     "--workers=5",
				"spec.template.spec.containers[csi-attacher].args[7]":    "--reconcile-sync=2m",
				"spec.template.spec.containers[csi-snapshotter].args[2]": "--timeout=5m",
			},
		},
		{
			name: "node placement, kubelet directory and volume limit",
			set: []string{
				"node.kubeletDir=/var/lib/k0s/kubelet", "node.maxVolumesPerNode=16",
				"node.nodeSelector.pool=storage", "node.tolerations=null",
			},
			kind: "DaemonSet", objNm: "diskforge-node",
			want: map[string]any{
				"spec.template.spec.nodeSelector":                                           map[string]any{"kubernetes.io/os": "linux", "pool": "storage"},
				"spec.template.spec.tolerations":                                            nil,
				"spec.template.spec.containers[driver].args[5]":                             "--max-volumes-per-node=16",
				"spec.template.spec.containers[driver].volumeMounts[kubelet-dir].mountPath": "/var/lib/k0s/kubelet",
				"spec.template.spec.volumes[kubelet-dir].hostPath.path":                     "/var/lib/k0s/kubelet",
				"spec.template.spec.volumes[plugin-dir].hostPath.path":                      "/var/lib/k0s/kubelet/plugins/disk.csi.diskforge.io/",
				"spec.template.spec.volumes[registration-dir].hostPath.path":                "/var/lib/k0s/kubelet/plugins_registry/",
				"spec.template.spec.containers[node-driver-registrar].args[1]":              "--kubelet-registration-path=/var/lib/k0s/kubelet/plugins/disk.csi.diskforge.io/csi.sock",
			},
		},
		{
			name: "the node plugin with fakecloud: waits for its Node's labels, makes loop device nodes",
			set:  []string{"fakecloud.enabled=true"},
			kind: "DaemonSet", objNm: "diskforge-node",
			want: map[string]any{
				"spec.template.spec.containers[driver].args": []any{"--mode=node", "--endpoint=unix:///csi/csi.sock",
					"--node-name=$(NODE_NAME)", "--http-endpoint=0.0.0.0:3302", "--v=2", "--shutdown-wait=50s",
					"--node-identity-wait=5m", "--loop-device-nodes=256"},
				"spec.template.spec.affinity": nil,
			},
		},
		{
			name: "the node plugin with fakecloud but not its kube-nodes mode, and a count of loop device nodes",
			set:  []string{"fakecloud.enabled=true", "fakecloud.kubeNodes.enabled=false", "node.loopDeviceNodes=16", "node.extraArgs={--extra}"},
			kind: "DaemonSet", objNm: "diskforge-node",
			want: map[string]any{
				"spec.template.spec.containers[driver].args[6]": "--loop-device-nodes=16",
				"spec.template.spec.containers[driver].args[7]": "--extra",
			},
		},
		{
			name: "the node plugin formatting xfs for old kernels",
			set:  []string{"node.legacyXFS=true", "node.extraArgs={--extra}"},
			kind: "DaemonSet", objNm: "diskforge-node",
			want: map[string]any{
				"spec.template.spec.containers[driver].args[6]": "--legacy-xfs=true",
				"spec.template.spec.containers[driver].args[7]": "--extra",
			},
		},
		{
			name: "SELinux nodes: the node plugin reads the host's SELinux config",
			set:  []string{"node.selinux=true"},
			kind: "DaemonSet", objNm: "diskforge-node",
			want: map[string]any{
				"spec.template.spec.containers[driver].volumeMounts[selinux-config]": map[string]any{
					"name": "selinux-config", "mountPath": "/etc/selinux/config", "readOnly": true},
				"spec.template.spec.volumes[selinux-config].hostPath": map[string]any{"path": "/etc/selinux/config", "type": "File"},
			},
		},
		{
			name: "SELinux nodes: the CSIDriver declares seLinuxMount",
			set:  []string{"node.selinux=true"},
			kind: "CSIDriver", objNm: "disk.csi.diskforge.io",
			want: map[string]any{"spec.seLinuxMount": true, "spec.attachRequired": true},
		},
		{
			name: "fakecloud's kube-nodes mode on with fakecloud",
			set:  []string{"fakecloud.enabled=true", "fakecloud.kubeNodes.zones={us-east-1c}"},
			kind: "Deployment", objNm: "fakecloud",
			want: map[string]any{
				"spec.template.spec.serviceAccountName":            "fakecloud",
				"spec.template.spec.containers[fakecloud].args[7]": "--kube-nodes",
				"spec.template.spec.containers[fakecloud].args[8]": "--kube-node-zones=us-east-1c",
			},
		},
		{
			name: "extra tags on every class",
			set:  []string{"extraVolumeTags.team=storage", "extraVolumeTags.cost-center=42"},
			kind: "StorageClass", objNm: "diskforge-xfs",
			want: map[string]any{
				"parameters": map[string]any{
					"type": "gp3", "csi.storage.k8s.io/fstype": "xfs",
					"tagSpecification_extra_1": "cost-center=42", "tagSpecification_extra_2": "team=storage",
				},
			},
		},
		{
			name: "extra tags on snapshots",
			set:  []string{"extraVolumeTags.team=storage"},
			kind: "VolumeSnapshotClass", objNm: "diskforge-snapshots",
			want: map[string]any{"parameters": map[string]any{"tagSpecification_extra_1": "team=storage"}},
		},
		{
			name: "created credentials Secret",
			set:  []string{"cloud.credentials.create=true", "cloud.credentials.accessKeyId=AKIA1", "cloud.credentials.secretAccessKey=s3cret"},
			kind: "Secret", objNm: "aws-credentials",
			want: map[string]any{"data": map[string]any{"key_id": "QUtJQTE=", "access_key": "czNjcmV0"}, "type": "Opaque"},
		},
		{
			name: "IRSA annotation",
			set:  []string{"controller.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/d"},
			kind: "ServiceAccount", objNm: "diskforge-controller",
			want: map[string]any{"metadata.annotations": map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/d"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			var o obj
			for _, x := range helmTemplate(t, helm, root, args...) {
				if x["kind"] == tc.kind && meta(x)["name"] == tc.objNm {
					o = x
				}
			}
			if o == nil {
				t.Fatalf("no %s %s rendered", tc.kind, tc.objNm)
			}
			for _, path := range sortedKeys(tc.want) {
				got, err := lookup(o, path)
				if err != nil {
					t.Errorf("%s: %v", path, err)
					continue
				}
				if !reflect.DeepEqual(got, tc.want[path]) {
					t.Errorf("%s = %#v, want %#v", path, got, tc.want[path])
				}
			}
		})
	}
}

// TestChartAddOns checks which optional objects the switches render: fakecloud brings the snapshot-controller
// unless snapshotController.enabled says otherwise, and the credentials Secret.
func TestChartAddOns(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	addOns := []string{"Deployment/diskforge-system/fakecloud", "Deployment/kube-system/snapshot-controller", "Secret/diskforge-system/aws-credentials", "ConfigMap/diskforge-system/diskforge-cloud", "ClusterRole//diskforge-fakecloud", "Pod/diskforge-system/diskforge-selftest"}
	for _, tc := range []struct {
		name string
		set  []string
		want []bool // per addOns
	}{
		{"defaults", nil, []bool{false, false, false, true, false, true}},
		{"fakecloud", []string{"fakecloud.enabled=true"}, []bool{true, true, true, false, true, true}},
		{"fakecloud without the snapshot-controller", []string{"fakecloud.enabled=true", "snapshotController.enabled=false"}, []bool{true, false, true, false, true, true}},
		{"fakecloud without its kube-nodes mode", []string{"fakecloud.enabled=true", "fakecloud.kubeNodes.enabled=false"}, []bool{true, true, true, false, false, true}},
		{"kube-nodes without fakecloud", []string{"fakecloud.kubeNodes.enabled=true"}, []bool{false, false, false, true, false, true}},
		{"the snapshot-controller alone", []string{"snapshotController.enabled=true"}, []bool{false, true, false, true, false, true}},
		{"without the helm test", []string{"tests.enabled=false"}, []bool{false, false, false, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			got := byKey(t, helmTemplate(t, helm, root, args...))
			for i, k := range addOns {
				if _, ok := got[k]; ok != tc.want[i] {
					t.Errorf("%s rendered: %v, want %v", k, ok, tc.want[i])
				}
			}
		})
	}
}

// TestChartMetricsAndBudget checks what the metrics and disruption budget values render: the metrics Services
// only with metrics.enabled, the ServiceMonitor only with both switches, the budget only with more than one
// controller replica.
func TestChartMetricsAndBudget(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	objects := []string{"Service/" + namespace + "/diskforge-controller-metrics", "Service/" + namespace + "/diskforge-node-metrics",
		"ServiceMonitor/" + namespace + "/diskforge", "PodDisruptionBudget/" + namespace + "/diskforge-controller"}
	for _, tc := range []struct {
		name string
		set  []string
		want []bool // per objects
		// check holds paths of an object (by key) and the values they must have.
		check map[string]map[string]any
	}{
		{name: "defaults", want: []bool{false, false, false, true},
			check: map[string]map[string]any{objects[3]: {"spec.maxUnavailable": 1.0,
				"spec.selector.matchLabels": map[string]any{"app.kubernetes.io/name": "diskforge-controller"}}}},
		{name: "one replica", set: []string{"controller.replicas=1"}, want: []bool{false, false, false, false}},
		{name: "budget off", set: []string{"controller.podDisruptionBudget.enabled=false"}, want: []bool{false, false, false, false}},
		{name: "metrics", set: []string{"metrics.enabled=true", "node.metricsPort=9100"}, want: []bool{true, true, false, true},
			check: map[string]map[string]any{
				objects[0]: {"spec.ports[metrics].port": 3301.0, "spec.clusterIP": "None",
					"spec.selector": map[string]any{"app.kubernetes.io/name": "diskforge-controller"}},
				objects[1]: {"spec.ports[metrics].port": 9100.0, "spec.ports[metrics].targetPort": "metrics",
					"spec.selector": map[string]any{"app.kubernetes.io/name": "diskforge-node"}},
			}},
		{name: "a ServiceMonitor needs the Services", set: []string{"metrics.serviceMonitor.enabled=true"}, want: []bool{false, false, false, true}},
		{name: "ServiceMonitor", set: []string{"metrics.enabled=true", "metrics.serviceMonitor.enabled=true",
			"metrics.serviceMonitor.interval=15s", "metrics.serviceMonitor.labels.release=prom"}, want: []bool{true, true, true, true},
			check: map[string]map[string]any{objects[2]: {"metadata.labels.release": "prom", "spec.endpoints[0].interval": "15s",
				"spec.endpoints[0].port": "metrics", "spec.endpoints[0].honorLabels": true,
				"spec.namespaceSelector.matchNames": []any{namespace}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			got := byKey(t, helmTemplate(t, helm, root, args...))
			for i, k := range objects {
				if _, ok := got[k]; ok != tc.want[i] {
					t.Errorf("%s rendered: %v, want %v", k, ok, tc.want[i])
				}
			}
			for k, paths := range tc.check {
				for path, want := range paths {
					v, err := lookup(got[k], path)
					if err != nil {
						t.Errorf("%s %s: %v", k, path, err)
					} else if !reflect.DeepEqual(v, want) {
						t.Errorf("%s %s = %s, want %s", k, path, compact(v), compact(want))
					}
				}
			}
		})
	}
}

// TestChartRefuses checks values the chart rejects instead of rendering something that cannot work, and the
// reason it gives.
func TestChartRefuses(t *testing.T) {
	root := repoRoot(t)
	helm := helmBinary(t, root)
	for _, tc := range []struct {
		name, set, why string
	}{
		{"two replicas without leader election", "sidecars.leaderElection.enabled=false", "needs controller.replicas=1"},
		{"a Secret to create without keys", "cloud.credentials.create=true", "needs cloud.credentials.accessKeyId"},
		{"an image without a tag", "sidecars.attacher.image.tag=", "csi-attacher has no tag"},
		{"a misspelt value (values.schema.json)", "controler.replicas=1", "controler"},
		{"a StorageClass reclaim policy", "storageClasses[0].reclaimPolicy=Recycle", "reclaimPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", release, filepath.Join(root, chartDir), "--namespace", namespace, "--set", tc.set}
			out, err := runHelm(t, helm, args...)
			if err == nil {
				t.Fatalf("helm %s rendered:\n%s", strings.Join(args, " "), out)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("helm %s: %v, want an error saying %q", strings.Join(args, " "), err, tc.why)
			}
		})
	}
}

// normaliseKustomize takes out of the overlay's objects what differs from the chart on purpose:
//   - the hash suffix of generated Secrets and ConfigMaps (aws-credentials-<hash>, diskforge-cloud-<hash>) in
//     names and references: kustomize rolls pods through the new name, the chart through a checksum
//     annotation on the pod templates (see normaliseHelm);
//   - the label app.kubernetes.io/part-of, which base sets on its objects only (not on the kind overlay's
//     fakecloud and snapshot-controller); the chart sets it on every object, checked in normaliseHelm;
//   - metadata.namespace on VolumeSnapshotClass, VolumeGroupSnapshotClass and VolumeAttributesClass:
//     cluster-scoped, but kustomize's schema does not know them, so its namespace: field gives them one (the API
//     server drops it).
func normaliseKustomize(objs []obj) []obj {
	generated := regexp.MustCompile(`^(aws-credentials|diskforge-cloud)-[a-z0-9]{10}$`)
	for i, o := range objs {
		objs[i] = mapStrings(o, func(s string) string { return generated.ReplaceAllString(s, "$1") }).(obj)
		deleteKey(meta(objs[i]), "labels", "app.kubernetes.io/part-of")
		if clusterScopedUnknownToKustomize[o["kind"].(string)] {
			delete(meta(objs[i]), "namespace")
		}
	}
	return objs
}

var clusterScopedUnknownToKustomize = map[string]bool{"VolumeSnapshotClass": true, "VolumeGroupSnapshotClass": true, "VolumeAttributesClass": true}

// helmLabels are Helm's standard labels, on every object of the chart and on none of the overlays'.
var helmLabels = map[string]string{
	"helm.sh/chart":                "",
	"app.kubernetes.io/managed-by": "Helm",
	"app.kubernetes.io/instance":   release,
	"app.kubernetes.io/version":    "",
	"app.kubernetes.io/part-of":    "diskforge",
}

// normaliseHelm checks and then takes out of the chart's objects what differs from the overlays on purpose:
// Helm's standard labels (helmLabels) on every object but the CRDs (crds/ is applied as it is, and kept
// unchanged from upstream), and the checksum/cloud-config annotation on the pod templates of the controller and
// the node plugin.
func normaliseHelm(t *testing.T, objs []obj) []obj {
	t.Helper()
	for _, o := range objs {
		if o["kind"] == "CustomResourceDefinition" {
			continue
		}
		labels, _ := meta(o)["labels"].(obj)
		for k, v := range helmLabels {
			if got, ok := labels[k].(string); !ok || got == "" || (v != "" && got != v) {
				t.Errorf("%s: label %s=%v, want %q", key(o), k, labels[k], v)
			}
			deleteKey(meta(o), "labels", k)
		}
		if name := meta(o)["name"]; o["kind"] == "Deployment" && name == "diskforge-controller" || o["kind"] == "DaemonSet" && name == "diskforge-node" {
			tmeta, err := lookup(o, "spec.template.metadata")
			if err != nil {
				t.Fatalf("%s: %v", key(o), err)
			}
			if sum, _ := lookup(o, "spec.template.metadata.annotations.checksum/cloud-config"); sum == nil {
				t.Errorf("%s: no checksum/cloud-config annotation on the pod template", key(o))
			}
			deleteKey(tmeta.(obj), "annotations", "checksum/cloud-config")
		}
	}
	return objs
}

// deleteKey deletes m[field][k], and m[field] once it is empty.
func deleteKey(m obj, field, k string) {
	sub, ok := m[field].(obj)
	if !ok {
		return
	}
	delete(sub, k)
	if len(sub) == 0 {
		delete(m, field)
	}
}

// mapStrings applies f to every string value in v.
func mapStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case obj:
		for k, e := range x {
			x[k] = mapStrings(e, f)
		}
	case []any:
		for i, e := range x {
			x[i] = mapStrings(e, f)
		}
	case string:
		return f(x)
	}
	return v
}

// diff lists the paths where want and got differ.
func diff(path string, want, got any) []string {
	if reflect.DeepEqual(want, got) {
		return nil
	}
	wm, wok := want.(obj)
	gm, gok := got.(obj)
	if wok && gok {
		var out []string
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			out = append(out, diff(path+"."+k, wm[k], gm[k])...)
		}
		return out
	}
	wl, wok := want.([]any)
	gl, gok := got.([]any)
	if wok && gok && len(wl) == len(gl) {
		var out []string
		for i := range wl {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), wl[i], gl[i])...)
		}
		return out
	}
	return []string{fmt.Sprintf("%s: overlay %s, chart %s", strings.TrimPrefix(path, "."), compact(want), compact(got))}
}

func compact(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}

// lookup follows a dotted path; "name[x]" picks the item of list name whose name is x, "name[3]" the fourth.
func lookup(o obj, path string) (any, error) {
	var cur any = o
	for _, part := range strings.Split(path, ".") {
		sel := ""
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			part, sel = part[:i], part[i+1:len(part)-1]
		}
		m, ok := cur.(obj)
		if !ok {
			return nil, fmt.Errorf("%s: not a map", part)
		}
		cur = m[part]
		if sel == "" {
			continue
		}
		list, _ := cur.([]any)
		var n int
		if _, err := fmt.Sscanf(sel, "%d", &n); err == nil {
			if n >= len(list) {
				return nil, fmt.Errorf("%s has %d items, no [%d]", part, len(list), n)
			}
			cur = list[n]
			continue
		}
		cur = nil
		for _, e := range list {
			if em, _ := e.(obj); em != nil && em["name"] == sel {
				cur = e
			}
		}
		if cur == nil {
			return nil, fmt.Errorf("%s has no item named %s", part, sel)
		}
	}
	return cur, nil
}

func meta(o obj) obj {
	m, _ := o["metadata"].(obj)
	if m == nil {
		m = obj{}
		o["metadata"] = m
	}
	return m
}

// key is kind/namespace/name.
func key(o obj) string {
	m := meta(o)
	ns, _ := m["namespace"].(string)
	return fmt.Sprintf("%v/%s/%v", o["kind"], ns, m["name"])
}

func byKey(t *testing.T, objs []obj) map[string]obj {
	t.Helper()
	out := map[string]obj{}
	for _, o := range objs {
		if _, dup := out[key(o)]; dup {
			t.Errorf("%s rendered twice", key(o))
		}
		out[key(o)] = o
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func kustomizeBuild(t *testing.T, dir string) []obj {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// helmTemplate renders the chart as release diskforge in diskforge-system with the extra helm arguments.
func helmTemplate(t *testing.T, helm, root string, args ...string) []obj {
	t.Helper()
	out, err := runHelm(t, helm, append([]string{"template", release, filepath.Join(root, chartDir), "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	return decode(t, out)
}

// runHelm runs helm with its cache, config and data directories in the test's temporary directory.
func runHelm(t *testing.T, helm string, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out, nil
}

func decode(t *testing.T, raw []byte) []obj {
	t.Helper()
	var objs []obj
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		o := obj{}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		if len(o) > 0 {
			objs = append(objs, o)
		}
	}
	return objs
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, chartDir, "Chart.yaml")); err != nil {
		t.Fatalf("not the repository root: %v", err)
	}
	return root
}

// helmBinary is $HELM, or the pinned helm that hack/build-e2e-tools.sh builds.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(root, ".cache/e2e-bin/helm")
	}
	_, err := exec.LookPath(helm)
	testutil.SkipUnless(t, err, "helm is needed (hack/build-e2e-tools.sh helm)")
	return helm
}
