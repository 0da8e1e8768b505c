package cluster

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderLocalOverlay renders the kind overlay as the harness applies it: the registrar and liveness probe are
// ours, and every other image is the overlay's own.
func TestRenderLocalOverlay(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{opts: Options{RepoRoot: root}}
	objs, err := c.renderManifests(LocalOverlay)
	if err != nil {
		t.Fatal(err)
	}
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
