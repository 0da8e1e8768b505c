package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRenderLocalOverlay renders the kind overlay as the harness applies it: the registrar and liveness probe are
// ours, and every other image is the overlay's own.
func TestRenderLocalOverlay(t *testing.T) {
	objs := renderLocalOverlay(t)
	images := map[string]bool{}
	for _, o := range objs {
		if k := o.GetKind(); k != "Deployment" && k != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructuredContainers(o.Object)
		for _, img := range containers {
			images[img] = true
		}
	}
	for _, want := range []string{"diskforge/csi-node-driver-registrar:dev", "diskforge/livenessprobe:dev",
		"diskforge/driver:dev", "diskforge/fakecloud:dev", "registry.k8s.io/sig-storage/csi-provisioner:v6.4.0"} {
		if !images[want] {
			t.Errorf("rendered overlay lacks image %s; has %v", want, images)
		}
	}
	for img := range images {
		if strings.Contains(img, "node-driver-registrar:v") || strings.Contains(img, "livenessprobe:v") {
			t.Errorf("upstream image %s left in the rendered overlay", img)
		}
	}
}

// renderLocalOverlay renders the overlay the harness applies, from this repository.
func renderLocalOverlay(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{RepoRoot: root}}
	objs, err := c.renderManifests(LocalOverlay)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func unstructuredContainers(obj map[string]any) ([]string, bool, error) {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	podSpec, _ := tmpl["spec"].(map[string]any)
	list, _ := podSpec["containers"].([]any)
	var out []string
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m["image"].(string))
		}
	}
	return out, len(out) > 0, nil
}

// TestInstanceMetadataWiring checks that the rendered overlay gets fakecloud's per-instance metadata listeners and
// the node plugin its node's metadata address, the pair the harness's relays join.
func TestInstanceMetadataWiring(t *testing.T) {
	objs := renderLocalOverlay(t)
	if err := withInstanceMetadata(objs); err != nil {
		t.Fatal(err)
	}
	var args, env string
	for _, o := range objs {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, ct := range containers {
			m := ct.(map[string]any)
			switch {
			case o.GetName() == "fakecloud" && m["name"] == "fakecloud":
				args = fmt.Sprint(m["args"])
			case o.GetName() == "diskforge-node" && m["name"] == "driver":
				env = fmt.Sprint(m["env"])
			}
		}
	}
	for _, n := range nodeSpecs {
		if !strings.Contains(args, n.InstanceID+"=0.0.0.0:") {
			t.Errorf("fakecloud's args %s serve no metadata for %s", args, n.InstanceID)
		}
	}
	if !strings.Contains(env, "status.hostIP") || !strings.Contains(env, "http://$(HOST_IP):8788") {
		t.Errorf("node plugin env %s lacks the node's metadata address", env)
	}
	if err := withInstanceMetadata(objs[:0]); err == nil {
		t.Error("an overlay without fakecloud and the node plugin was taken")
	}
}

func TestTestHookPod(t *testing.T) {
	obj := func(kind, hook string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetKind(kind)
		if hook != "" {
			o.SetAnnotations(map[string]string{"helm.sh/hook": hook})
		}
		return o
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"the helm test pod", obj("Pod", "test"), true},
		{"its ServiceAccount, still dry-run", obj("ServiceAccount", "test"), false},
		{"a pod of another hook", obj("Pod", "pre-install"), false},
		{"a plain pod", obj("Pod", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testHookPod(tt.obj); got != tt.want {
				t.Fatalf("testHookPod = %v, want %v", got, tt.want)
			}
		})
	}
}
