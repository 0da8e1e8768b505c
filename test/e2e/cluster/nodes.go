package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodeHostDirs are the fixed host paths a node's pods and runtime use (the manifests' hostPaths, kubelet's and
// containerd's own). Each node binds a directory of its own onto each, in a mount namespace of its own, so that
// three nodes share one host as three machines would: kubelet root dir /var/lib/kubelet as the DaemonSet expects,
// plugin sockets, fakecloud's data, pod logs, CNI state and containerd's shim sockets.
var nodeHostDirs = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/fakecloud",
	"/var/lib/cni", "/run/containerd"}

// kubeletConfig is a KubeletConfiguration for a kubelet on containerd, on a host it shares (serving on the node's own
// address on the pods' bridge, its node IP: kubelet refuses a loopback node IP, and the API server reaches it there
// for exec and logs): no QoS cgroup
// hierarchy of its own, no eviction from the host's disk use, anonymous local access only.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
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
podLogsDir: /var/log/pods
clusterDNS: [%s]
clusterDomain: %s
registerNode: true
serializeImagePulls: false
staticPodPath: ""
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
`

// containerdConfig is a containerd v2 configuration (version 3) of one node: its own root, state and socket,
// Debian's runc, the pause image built here as the sandbox image, its own CNI configuration. Root here lacks
// CAP_SYS_RESOURCE, so runc may not lower OOM scores: restrict_oom_score_adj.
const containerdConfig = `version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`

// SandboxImage is the pause image containerd runs pods' sandboxes with (built by make image).
const SandboxImage = "diskforge.local/pause:3.10.2"

// node is a started node: its processes and directories.
type node struct {
	info       NodeInfo
	dir        string
	socket     string // containerd's
	containerd *proc
	// kubeletArgs start its kubelet (nsenter into the node's mount namespace), the same at every start.
	kubeletArgs []string

	// mu serializes the kubelet's lifecycle (node-control API, SSH sessions) and guards what follows.
	mu      sync.Mutex
	kubelet *proc
	// kubeletStopped is true when the kubelet was stopped on request (systemd's inactive), false when it exited
	// by itself or was killed (failed).
	kubeletStopped bool
}

// startNodes starts every node: containerd (with the images imported) and a kubelet, in the node's own mount
// namespace, and waits until each is Ready.
func (c *Cluster) startNodes(ctx context.Context) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc: %w (Debian's runc; hack/deps.sh installs it)", err)
	}
	for i, spec := range nodeSpecs {
		n, err := c.startNode(ctx, spec, i, runc)
		if err != nil {
			return fmt.Errorf("node %s: %w", spec.Name, err)
		}
		c.nodes = append(c.nodes, n)
		c.info.Nodes = append(c.info.Nodes, n.info)
	}
	for _, n := range c.nodes {
		if err := c.waitNodeReady(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startNode(ctx context.Context, spec NodeInfo, i int, runc string) (*node, error) {
	dir := filepath.Join(c.info.WorkDir, "nodes", spec.Name)
	n := &node{info: spec, dir: dir, socket: filepath.Join(dir, "containerd.sock")}
	n.info.RootDir = "/var/lib/kubelet"
	// The node's view of the fixed host paths, bound in its mount namespace.
	var binds []string
	for _, hostDir := range nodeHostDirs {
		own := filepath.Join(dir, "host", strings.ReplaceAll(strings.TrimPrefix(hostDir, "/"), "/", "_"))
		if err := os.MkdirAll(own, 0o755); err != nil {
			return nil, err
		}
		binds = append(binds, fmt.Sprintf("mount --bind %q %q", own, hostDir))
	}
	cni := filepath.Join(dir, "cni")
	if err := writeCNIConfig(filepath.Join(cni, "net.d"), filepath.Join(cni, "ipam"), i); err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "containerd.toml")
	cfg := fmt.Sprintf(containerdConfig, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"),
		n.socket, n.socket+".ttrpc", SandboxImage, runc, filepath.Join(c.opts.BinDir, "cni"), filepath.Join(cni, "net.d"))
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	// unshare makes the mount namespace (its mounts slaves of the host's: host mounts reach the node, the node's
	// stay in it and go with it) and execs the shell, which binds the node's directories and execs containerd:
	// the process the harness started is containerd, and its namespace is the node's.
	// The kubelet directory is shared within the node, so that Bidirectional mounts of the node plugin reach the
	// kubelet (the namespace's mounts are slaves of the host's, so nothing goes back to the host).
	binds = append(binds, "mount --make-rshared /var/lib/kubelet")
	// The node's PID 1, as the node sees /proc, is its containerd (this shell, which execs it): on a machine PID 1
	// lives in the host's mount namespace, and tools enter it through /proc/1/ns/mnt (the e2e suite's hostexec
	// pods, from the host's / mounted at /rootfs). The real PID 1 here is not even readable.
	binds = append(binds, "mount --bind /proc/$$ /proc/1")
	script := strings.Join(binds, " && ") + " && exec " + fmt.Sprintf("%q --config %q", c.bin("containerd"), cfgFile)
	var err error
	n.containerd, err = c.start(spec.Name+"-containerd", "unshare", []string{"--mount", "--propagation", "slave",
		"/bin/sh", "-c", script}, "PATH="+c.opts.BinDir+":"+os.Getenv("PATH"))
	if err != nil {
		return nil, err
	}
	if err := poll(ctx, time.Minute, "containerd socket of "+spec.Name, func(context.Context) (bool, error) {
		if n.containerd.exited() {
			return false, fmt.Errorf("containerd exited: %s", n.containerd.tail())
		}
		_, err := os.Stat(n.socket)
		return err == nil, nil
	}); err != nil {
		return nil, err
	}
	n.info.Pid = n.containerd.cmd.Process.Pid
	if err := c.importImages(ctx, n); err != nil {
		return nil, err
	}

	cert, key, err := c.pki.issue("system:node:"+spec.Name, []string{"system:nodes"})
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := writeKubeconfig(kubeconfig, c.server, c.pki.CAFile, cert, key, ""); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	healthz, err := freePort()
	if err != nil {
		return nil, err
	}
	kcfgFile := filepath.Join(dir, "kubelet.yaml")
	kcfg := fmt.Sprintf(kubeletConfig, spec.Address, port, healthz, c.pki.CAFile, n.socket, n.socket, dnsServiceIP, clusterDomain)
	if err := os.WriteFile(kcfgFile, []byte(kcfg), 0o600); err != nil {
		return nil, err
	}
	n.kubeletArgs = []string{"--mount=/proc/" + fmt.Sprint(n.info.Pid) + "/ns/mnt", "--",
		c.bin("kubelet"), "--kubeconfig=" + kubeconfig, "--config=" + kcfgFile, "--root-dir=/var/lib/kubelet",
		"--hostname-override=" + spec.Name, "--node-ip=" + spec.Address, "--v=2",
	}
	// A node of the cluster's start knows its instance, as a cloud's node does; a late node knows nothing of it.
	if spec.InstanceID != "" {
		n.kubeletArgs = append(n.kubeletArgs,
			"--node-labels=topology.kubernetes.io/zone="+spec.Zone+",node.diskforge.io/instance-id="+spec.InstanceID+
				",node.kubernetes.io/instance-type="+spec.InstanceType,
			"--provider-id=aws:///"+spec.Zone+"/"+spec.InstanceID)
	}
	if n.kubelet, err = c.startRole(roleKubelet, spec.Name+"-kubelet", "nsenter", n.kubeletArgs); err != nil {
		return nil, err
	}
	return n, nil
}

// importImages loads every image tarball of make image into the node's containerd, and names the aliases.
func (c *Cluster) importImages(ctx context.Context, n *node) error {
	tars, err := filepath.Glob(filepath.Join(c.opts.ImagesDir, "*.tar"))
	if err != nil || len(tars) == 0 {
		return fmt.Errorf("no images in %s (run make image)", c.opts.ImagesDir)
	}
	start := time.Now()
	for _, t := range tars {
		cmd := exec.CommandContext(ctx, c.bin("ctr"), "--address", n.socket, "-n", "k8s.io", "images", "import", t)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", filepath.Base(t), err, out)
		}
	}
	for alias, image := range imageAliases {
		cmd := exec.CommandContext(ctx, c.bin("ctr"), "--address", n.socket, "-n", "k8s.io", "images", "tag", "--force", image, alias)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images tag %s %s: %w: %s", image, alias, err, out)
		}
	}
	c.logf("%s: imported %d images (and %d aliases) in %s", n.info.Name, len(tars), len(imageAliases),
		time.Since(start).Round(time.Millisecond))
	return nil
}

func (c *Cluster) waitNodeReady(ctx context.Context, n *node) error {
	return poll(ctx, 3*time.Minute, "node "+n.info.Name+" Ready", func(ctx context.Context) (bool, error) {
		if n.currentKubelet().exited() {
			return false, fmt.Errorf("kubelet exited: %s", n.currentKubelet().tail())
		}
		node, err := c.client.CoreV1().Nodes().Get(ctx, n.info.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, fmt.Errorf("%s: %s", cond.Reason, cond.Message)
			}
		}
		return false, nil
	})
}

// labelControlPlane gives the first node the control-plane role label, which fakecloud's Deployment selects
// (in kind, the control-plane node); kubelets may not set node-role labels themselves.
func (c *Cluster) labelControlPlane(ctx context.Context) error {
	patch := `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`
	_, err := c.client.CoreV1().Nodes().Patch(ctx, nodeSpecs[0].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// waitRegistered waits until every node's CSINode lists the driver with its topology keys.
func (c *Cluster) waitRegistered(ctx context.Context) error {
	for _, n := range c.info.Nodes {
		if err := poll(ctx, 3*time.Minute, "CSINode of "+n.Name, func(ctx context.Context) (bool, error) {
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
