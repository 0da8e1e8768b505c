//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/diskforge/diskforge/test/e2e/external/suitereport"
)

// runVersions are the versions an external storage suite run records (run.json, and so its Markdown): the
// driver's commit, e2e.test's, driver.yaml's digest, and what the cluster runs. What cannot be learnt says why
// in place of a version: the run goes on without it.
func runVersions(ctx context.Context, root, e2eTest, kubeconfig, driverYAML string) []suitereport.Version {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var vs []suitereport.Version
	add := func(name, version string, err error) {
		if err != nil {
			version = "unknown: " + err.Error()
		}
		vs = append(vs, suitereport.Version{Name: name, Version: version})
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	add("driver (git describe)", strings.TrimSpace(string(out)), err)
	out, err = exec.CommandContext(ctx, e2eTest, "--version").Output()
	add("e2e.test", strings.TrimSpace(string(out)), err)
	raw, err := os.ReadFile(driverYAML)
	sum := sha256.Sum256(raw)
	add("driver.yaml (sha256)", hex.EncodeToString(sum[:])[:16], err)

	if env.local {
		add("cluster", "local (test/e2e/cluster): control plane as processes, kubelets on containerd and runc", nil)
	} else {
		add("cluster", "-kubeconfig", nil)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	var cs *kubernetes.Clientset
	if err == nil {
		cs, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		add("cluster", "", err)
		return vs
	}
	server, err := cs.Discovery().ServerVersion()
	if err == nil {
		add("kube-apiserver", server.GitVersion, nil)
	} else {
		add("kube-apiserver", "", err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		add("nodes", "", err)
	} else {
		kubelets, runtimes, kernels := map[string]int{}, map[string]int{}, map[string]int{}
		for _, n := range nodes.Items {
			kubelets[n.Status.NodeInfo.KubeletVersion]++
			runtimes[n.Status.NodeInfo.ContainerRuntimeVersion]++
			kernels[n.Status.NodeInfo.KernelVersion+", "+n.Status.NodeInfo.OSImage]++
		}
		add("kubelet", counted(kubelets, "node"), nil)
		add("container runtime", counted(runtimes, "node"), nil)
		add("kernel, OS", counted(kernels, "node"), nil)
	}
	// The images running before the suite starts: the driver, its sidecars, fakecloud, the snapshot-controller.
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		add("images", "", err)
	} else {
		images := map[string]bool{}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				images[c.Image] = true
			}
		}
		add("images", strings.Join(slices.Sorted(maps.Keys(images)), ", "), nil)
	}
	return vs
}

// counted lists values with how many have each, when they differ: "v1.36.3 (3 nodes)".
func counted(values map[string]int, what string) string {
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(values)) {
		parts = append(parts, fmt.Sprintf("%s (%d %ss)", v, values[v], what))
	}
	return strings.Join(parts, "; ")
}

func writeJSON(file string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // <run-dir>, not \u003crun-dir\u003e
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}
