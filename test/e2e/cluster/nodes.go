package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeletConfig is a KubeletConfiguration for a kubelet on a fake runtime on a shared host: no cgroup
// hierarchy of its own, no eviction from the host's disk use, anonymous local access only.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
imageServiceEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
localStorageCapacityIsolation: false
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerNode: true
serializeImagePulls: false
staticPodPath: ""
fileCheckFrequency: 1s
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`

// startNodes starts, for every node, a fake container runtime, a kubelet, the driver's node plugin with the
// node DaemonSet's flags and service account, and a registrar that registers the plugin with the kubelet.
func (c *Cluster) startNodes(ctx context.Context) error {
	for _, spec := range nodeSpecs {
		n := spec
		n.RootDir = filepath.Join(c.info.WorkDir, "nodes", n.Name, "kubelet")
		if err := c.startNode(ctx, n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		c.info.Nodes = append(c.info.Nodes, n)
	}
	return nil
}

func (c *Cluster) startNode(ctx context.Context, n NodeInfo) error {
	dir := filepath.Dir(n.RootDir)
	if err := os.MkdirAll(n.RootDir, 0o750); err != nil {
		return err
	}
	criSock := filepath.Join(dir, "fakecri.sock")
	cri, err := c.start(n.Name+"-fakecri", c.bin("fakecri"), []string{"--socket=" + criSock})
	if err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, "fake runtime socket", func(context.Context) (bool, error) {
		if cri.exited() {
			return false, fmt.Errorf("fakecri exited: %s", cri.tail())
		}
		_, err := os.Stat(criSock)
		return err == nil, nil
	}); err != nil {
		return err
	}
	cert, key, err := c.pki.issue("system:node:"+n.Name, []string{"system:nodes"})
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.server, c.pki.CAFile, cert, key, ""); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	healthz, err := freePort()
	if err != nil {
		return err
	}
	cfgFile := filepath.Join(dir, "kubelet.yaml")
	cfg := fmt.Sprintf(kubeletConfig, port, healthz, c.pki.CAFile, criSock, criSock)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return err
	}
	kubelet, err := c.start(n.Name+"-kubelet", c.bin("kubelet"), []string{
		"--kubeconfig=" + kubeconfig, "--config=" + cfgFile, "--root-dir=" + n.RootDir,
		"--cert-dir=" + filepath.Join(dir, "pki"), "--hostname-override=" + n.Name, "--node-ip=127.0.0.1",
		"--node-labels=topology.kubernetes.io/zone=" + n.Zone, "--provider-id=aws:///" + n.Zone + "/" + n.InstanceID,
		"--v=2",
	})
	if err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, "node "+n.Name+" Ready", func(ctx context.Context) (bool, error) {
		if kubelet.exited() {
			return false, fmt.Errorf("kubelet exited: %s", kubelet.tail())
		}
		node, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	sock := filepath.Join(n.RootDir, "plugins", DriverName, "csi.sock")
	if err := c.runNodePlugin(ctx, n, sock); err != nil {
		return err
	}
	return c.startRegistrar(ctx, n, sock)
}

// waitRegistered waits until every node's CSINode lists the driver with its topology keys.
func (c *Cluster) waitRegistered(ctx context.Context) error {
	for _, n := range c.info.Nodes {
		if err := poll(ctx, time.Minute, "CSINode of "+n.Name, func(ctx context.Context) (bool, error) {
			csiNode, err := c.client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, d := range csiNode.Spec.Drivers {
				if d.Name == DriverName && d.NodeID == n.InstanceID && len(d.TopologyKeys) > 0 {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return err
		}
	}
	return nil
}
