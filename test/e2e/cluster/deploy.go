package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Overlay is the kustomize overlay the local cluster deploys: the one that points the driver at fakecloud.
const Overlay = "deploy/kustomize/overlays/kind"

// checkedOnly are the other renders the harness sends to the API server as a server-side dry run.
var checkedOnly = []string{"deploy/kustomize/base", "deploy/kustomize/overlays/provider"}

// workload is a Deployment's or DaemonSet's pod template as the harness runs it: each container as a local
// process with the template's flags, environment and service account.
type workload struct {
	kind, name, namespace, serviceAccount string
	containers                            []corev1.Container
}

// renderManifests builds the overlay with kustomize (the library kubectl kustomize runs) and decodes every
// object.
func (c *Cluster) renderManifests(dir string) ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(c.opts.RepoRoot, dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return nil, err
	}
	return decodeYAML(out)
}

func decodeYAML(raw []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, err
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs, nil
}

// applyManifests installs the snapshot CRDs, then sends every rendered object to the API server as a
// server-side dry run (so a manifest the server refuses fails the run) and applies for real all but the
// workloads, which the harness runs itself as local processes.
func (c *Cluster) applyManifests(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.info.Kubeconfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	crds, err := filepath.Glob(filepath.Join(c.opts.BinDir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no snapshot CRDs in %s/crds (run hack/build-e2e-tools.sh)", c.opts.BinDir)
	}
	for _, f := range crds {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		objs, err := decodeYAML(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, o := range objs {
			if err := apply(ctx, dyn, mapper, o, false); err != nil {
				return err
			}
			if err := c.waitEstablished(ctx, dyn, o.GetName()); err != nil {
				return err
			}
		}
	}
	mapper.Reset()
	objs, err := c.renderManifests(Overlay)
	if err != nil {
		return err
	}
	// Namespaces first, so namespaced objects have somewhere to go.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	for _, o := range objs {
		if err := apply(ctx, dyn, mapper, o, true); err != nil {
			return fmt.Errorf("server-side dry run refused %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			w, err := toWorkload(o)
			if err != nil {
				return err
			}
			c.workloads = append(c.workloads, w)
			continue
		case "Service", "Job", "Pod", "StatefulSet":
			continue
		}
		if err := apply(ctx, dyn, mapper, o, false); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	c.logf("applied %d objects of %s (all passed server-side dry run); %d workloads run locally", len(objs), Overlay, len(c.workloads))
	for _, dir := range checkedOnly {
		objs, err := c.renderManifests(dir)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := apply(ctx, dyn, mapper, o, true); err != nil {
				return fmt.Errorf("server-side dry run refused %s %s of %s: %w", o.GetKind(), o.GetName(), dir, err)
			}
		}
		c.logf("%d objects of %s passed server-side dry run", len(objs), dir)
	}
	return nil
}

func apply(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("map %s: %w", gvk, err)
	}
	raw, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "diskforge-e2e", Force: ptr(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		ns := o.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		ri = dyn.Resource(m.Resource).Namespace(ns)
	}
	_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, raw, opts)
	return err
}

func ptr[T any](v T) *T { return &v }

func (c *Cluster) waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	gvr := apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	return poll(ctx, time.Minute, "CRD "+name, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func toWorkload(o *unstructured.Unstructured) (workload, error) {
	var spec corev1.PodSpec
	switch o.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			return workload{}, err
		}
		spec = d.Spec.Template.Spec
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			return workload{}, err
		}
		spec = d.Spec.Template.Spec
	}
	return workload{kind: o.GetKind(), name: o.GetName(), namespace: o.GetNamespace(), serviceAccount: spec.ServiceAccountName,
		containers: spec.Containers}, nil
}

// binaryFor maps a container image to the local binary that plays it; "" means the harness does not run it.
func (c *Cluster) binaryFor(image string) string {
	name := image[strings.LastIndex(image, "/")+1:]
	name, _, _ = strings.Cut(name, ":")
	switch name {
	case "csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter", "snapshot-controller":
		return c.bin(name)
	case "driver":
		return filepath.Join(c.opts.RepoRoot, "bin", "driver")
	}
	// fakecloud runs once for the whole cluster; node-driver-registrar's part is played by the harness; the
	// livenessprobe is not served by the module proxy.
	return ""
}

// tokenKubeconfig mints a token for a service account and writes a kubeconfig that authenticates with it, so a
// process has exactly the permissions the manifests grant that account.
func (c *Cluster) tokenKubeconfig(ctx context.Context, namespace, sa, file string) error {
	if sa == "" {
		sa = "default"
	}
	tok, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, sa, err)
	}
	return writeKubeconfig(file, c.server, c.pki.CAFile, "", "", tok.Status.Token)
}

// runWorkload runs w's containers locally: socket replaces the CSI endpoint they share; nodeName (for a
// DaemonSet) feeds the downward API.
func (c *Cluster) runWorkload(ctx context.Context, w workload, prefix, socket, nodeName string) error {
	kubeconfig := filepath.Join(c.info.WorkDir, "kubeconfigs", prefix+".kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o750); err != nil {
		return err
	}
	if err := c.tokenKubeconfig(ctx, w.namespace, w.serviceAccount, kubeconfig); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return err
	}
	started := 0
	for _, ctr := range w.containers {
		bin := c.binaryFor(ctr.Image)
		if bin == "" {
			continue
		}
		env, err := c.resolveEnv(ctx, w, ctr, nodeName)
		if err != nil {
			return err
		}
		args, err := c.localArgs(ctr, env, socket, kubeconfig)
		if err != nil {
			return err
		}
		var envList []string
		for k, v := range env {
			envList = append(envList, k+"="+v)
		}
		p, err := c.start(prefix+"-"+ctr.Name, bin, args, envList...)
		if err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
		if p.exited() {
			return fmt.Errorf("%s exited at start: %s", ctr.Name, p.tail())
		}
		started++
	}
	if started == 0 {
		return fmt.Errorf("%s %s has no container the harness can run", w.kind, w.name)
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// localArgs are the container's command-line flags with $(VAR) expanded as Kubernetes does, the CSI socket,
// metrics ports and cloud endpoint made local, and the service account's kubeconfig added.
func (c *Cluster) localArgs(ctr corev1.Container, env map[string]string, socket, kubeconfig string) ([]string, error) {
	args := append(append([]string{}, ctr.Command[min(len(ctr.Command), 1):]...), ctr.Args...)
	var out []string
	for _, a := range args {
		a = varRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[varRef.FindStringSubmatch(m)[1]]; ok {
				return v
			}
			return m
		})
		flag, _, hasValue := strings.Cut(a, "=")
		switch {
		case hasValue && (flag == "--csi-address" || flag == "--endpoint"):
			if flag == "--endpoint" {
				a = flag + "=unix://" + socket
			} else {
				a = flag + "=" + socket
			}
		case hasValue && (flag == "--http-endpoint" || flag == "--metrics-address"):
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			a = flag + "=" + addr
		case hasValue && flag == "--cloud-endpoint":
			a = flag + "=" + c.info.CloudURL
		case flag == "--kubeconfig":
			continue
		}
		out = append(out, a)
	}
	return append(out, "--kubeconfig="+kubeconfig), nil
}

// resolveEnv evaluates the container's environment: values, the downward API fields the harness knows, and
// keys of Secrets and ConfigMaps the manifests created.
func (c *Cluster) resolveEnv(ctx context.Context, w workload, ctr corev1.Container, nodeName string) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(m string) string { return env[varRef.FindStringSubmatch(m)[1]] })
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "spec.nodeName":
				env[e.Name] = nodeName
			case "metadata.namespace":
				env[e.Name] = w.namespace
			case "metadata.name":
				env[e.Name] = w.name
			default:
				return nil, fmt.Errorf("%s: env %s: field %s not supported by the harness", ctr.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			s, err := c.client.CoreV1().Secrets(w.namespace).Get(ctx, e.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("%s: env %s: %w", ctr.Name, e.Name, err)
			}
			env[e.Name] = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
		case e.ValueFrom.ConfigMapKeyRef != nil:
			cm, err := c.client.CoreV1().ConfigMaps(w.namespace).Get(ctx, e.ValueFrom.ConfigMapKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("%s: env %s: %w", ctr.Name, e.Name, err)
			}
			env[e.Name] = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		}
	}
	return env, nil
}

// runNodePlugin runs the node DaemonSet's containers for one node.
func (c *Cluster) runNodePlugin(ctx context.Context, n NodeInfo, socket string) error {
	for _, w := range c.workloads {
		if w.kind == "DaemonSet" && c.runsDriver(w) {
			return c.runWorkload(ctx, w, n.Name+"-"+w.name, socket, n.Name)
		}
	}
	return fmt.Errorf("no DaemonSet running the driver in %s", Overlay)
}

// startController runs every Deployment the harness can play but fakecloud: the driver's controller with its
// sidecars, and the snapshot controller.
func (c *Cluster) startController(ctx context.Context) error {
	for _, w := range c.workloads {
		if w.kind != "Deployment" {
			continue
		}
		socket := filepath.Join(c.info.WorkDir, "controller", w.name, "csi.sock")
		runnable := false
		for _, ctr := range w.containers {
			runnable = runnable || c.binaryFor(ctr.Image) != ""
		}
		if !runnable {
			continue
		}
		if err := c.runWorkload(ctx, w, w.name, socket, ""); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}
	return nil
}

func (c *Cluster) runsDriver(w workload) bool {
	for _, ctr := range w.containers {
		if strings.HasSuffix(filepath.Base(c.binaryFor(ctr.Image)), "driver") {
			return true
		}
	}
	return false
}
