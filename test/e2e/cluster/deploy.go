package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

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

// workload is a Deployment or DaemonSet of the overlay, awaited until its pods are ready.
type workload struct{ kind, name, namespace string }

// LocalOverlay is Overlay with the image overrides of the offline clusters (its kustomization says which).
const LocalOverlay = "test/e2e/localimages"

// renderManifests builds the kustomization at dir (relative to the repository) with kustomize (the library
// kubectl kustomize runs) and decodes every object.
func (c *Cluster) renderManifests(dir string) ([]*unstructured.Unstructured, error) {
	path := filepath.Join(c.opts.RepoRoot, dir)
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), path)
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

// applyManifests installs the snapshot CRDs, then applies every object of the kind overlay (server-side apply:
// a manifest the server refuses fails the run), workloads included, and sends the base and the provider overlay
// to the API server as a server-side dry run.
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
	objs, err := c.renderManifests(LocalOverlay)
	if err != nil {
		return err
	}
	if err := withInstanceMetadata(objs); err != nil {
		return err
	}
	if c.info.Cloud, err = cloudCredentials(objs); err != nil {
		return err
	}
	// Namespaces first, so namespaced objects have somewhere to go.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
	// fakecloud first, as test/e2e/kind/run.sh does: the node plugins read their instance from it when they start,
	// so the nodes are registered as instances before the other workloads are applied (applyWorkloads).
	var later []*unstructured.Unstructured
	for _, o := range objs {
		k := o.GetKind()
		if k == "Deployment" || k == "DaemonSet" {
			c.workloads = append(c.workloads, workload{kind: k, name: o.GetName(), namespace: o.GetNamespace()})
			if o.GetLabels()["app.kubernetes.io/component"] != "fakecloud" {
				later = append(later, o)
				continue
			}
		}
		if err := apply(ctx, dyn, mapper, o, false); err != nil {
			return fmt.Errorf("apply %s %s: %w", k, o.GetName(), err)
		}
	}
	c.applyWorkloads = func(ctx context.Context) error {
		for _, o := range later {
			if err := apply(ctx, dyn, mapper, o, false); err != nil {
				return fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		c.logf("applied the %d other workloads of %s", len(later), Overlay)
		return nil
	}
	c.logf("applied %d objects of %s but %d workloads, which follow fakecloud", len(objs)-len(later), Overlay, len(later))
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
	return c.dryRunCharts(ctx, dyn, mapper)
}

// chartRenders are the Helm chart rendered by make manifests (deploy/check-manifests.sh) with the default, kind
// and provider values.
var chartRenders = []string{"helm-default.yaml", "helm-kind.yaml", "helm-provider.yaml"}

// dryRunCharts sends every object of the chart's renders to the API server as a server-side dry run. make test
// renders them first; a run without them (make e2e alone) says so and goes on.
func (c *Cluster) dryRunCharts(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper) error {
	for _, name := range chartRenders {
		file := filepath.Join(c.opts.RepoRoot, "_output", "manifests", name)
		raw, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			c.logf("no %s (make manifests renders the Helm chart): not dry-run", file)
			continue
		}
		if err != nil {
			return err
		}
		objs, err := decodeYAML(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		// Namespaces first, as a real install creates them before what goes in them.
		sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetKind() == "Namespace" && objs[j].GetKind() != "Namespace" })
		checked := 0
		for _, o := range objs {
			if testHookPod(o) {
				continue
			}
			if err := apply(ctx, dyn, mapper, o, true); err != nil {
				return fmt.Errorf("server-side dry run refused %s %s of the chart (%s): %w", o.GetKind(), o.GetName(), name, err)
			}
			checked++
		}
		c.logf("%d objects of the Helm chart (%s) passed server-side dry run (%d helm test pods not sent)", checked, name, len(objs)-checked)
	}
	return nil
}

// cloudCredentials reads the overlay's aws-credentials Secret (kustomize adds a hash to its name): the key pair
// the driver signs with and fakecloud checks, and fakecloud's admin token.
func cloudCredentials(objs []*unstructured.Unstructured) (CloudCredentials, error) {
	for _, o := range objs {
		if o.GetKind() != "Secret" || !strings.HasPrefix(o.GetName(), "aws-credentials") {
			continue
		}
		var cc CloudCredentials
		for key, dst := range map[string]*string{"key_id": &cc.AccessKeyID, "access_key": &cc.SecretAccessKey, "admin_token": &cc.AdminToken} {
			enc, _, _ := unstructured.NestedString(o.Object, "data", key)
			raw, err := base64.StdEncoding.DecodeString(enc)
			if err != nil || len(raw) == 0 {
				return CloudCredentials{}, fmt.Errorf("secret %s: no %s", o.GetName(), key)
			}
			*dst = string(raw)
		}
		return cc, nil
	}
	return CloudCredentials{}, fmt.Errorf("%s renders no aws-credentials Secret", Overlay)
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

// testHookPod reports a Pod of `helm test`: its ServiceAccount is a hook of its own that a dry run does not
// create, so the API server would refuse the Pod for a reason a real `helm test` never meets.
func testHookPod(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Pod" && strings.Contains(o.GetAnnotations()["helm.sh/hook"], "test")
}
