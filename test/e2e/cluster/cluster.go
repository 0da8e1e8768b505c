package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// DriverName is the CSI driver the cluster runs.
const DriverName = "disk.csi.diskforge.io"

// Options shape a local cluster run.
type Options struct {
	// RepoRoot is the repository.
	RepoRoot string
	// BinDir holds the Kubernetes binaries, containerd, the CNI plugins and the snapshot CRDs; default
	// RepoRoot/.cache/e2e-bin.
	BinDir string
	// ImagesDir holds the image tarballs of make image; default RepoRoot/_output/images.
	ImagesDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
	// KeepWorkDir keeps logs and state after Stop.
	KeepWorkDir bool
	// LogsDir, if set, receives a copy of the run's logs at Stop (saveLogs).
	LogsDir string
}

// Cluster is a running local cluster.
type Cluster struct {
	opts   Options
	info   Info
	pki    *pki
	procs  []*proc
	nodes  []*node
	client kubernetes.Interface
	server string
	cancel context.CancelFunc
	// host is what the run found on the host and must restore.
	host *hostState
	// undo are teardown steps of what the start did, run in reverse order after the processes stopped.
	undo      []func() error
	lock      *os.File
	workloads []workload
	// applyWorkloads applies the overlay's workloads but fakecloud (set by applyManifests).
	applyWorkloads func(context.Context) error
	// ssh serves the nodes' SSH endpoints.
	ssh *sshServer

	// mu guards procs, nodes and stopped: the node-control API starts kubelets while scenarios and SSH sessions run,
	// and Stop may come from a signal.
	mu      sync.Mutex
	stopped bool
}

// Info describes the running cluster.
func (c *Cluster) Info() Info { return c.info }

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

// nodeSpecs are the cluster's nodes: two in zone a, one in zone b. Each has an address of its own on the bridge
// (below the pods' ranges): its InternalIP, where its kubelet serves and its SSH endpoint listens.
var nodeSpecs = []NodeInfo{
	{Name: "node-a1", Zone: "us-east-1a", InstanceID: "i-0e2e0000000000a01", InstanceType: "m5.large", Address: "10.244.0.2"},
	{Name: "node-a2", Zone: "us-east-1a", InstanceID: "i-0e2e0000000000a02", InstanceType: "c5.xlarge", Address: "10.244.0.3"},
	{Name: "node-b1", Zone: "us-east-1b", InstanceID: "i-0e2e0000000000b01", InstanceType: "m4.large", Address: "10.244.0.4"},
}

// lateNodeSpecs are nodes a scenario adds once the driver is installed (AddNode), as a user's cluster grows: they
// join with no zone, instance ID, instance type or provider ID of ours, and fakecloud's kube-nodes mode makes
// each an instance and labels its Node. Their addresses and pod ranges are set aside at the start.
var lateNodeSpecs = []NodeInfo{
	{Name: LateNode, Address: "10.244.0.5"},
}

// LateNode is the node a scenario may add (AddNode) and remove (RemoveNode).
const LateNode = "node-late1"

// lockFile serializes runs of the harness: the cluster's addresses, bridge and host paths are fixed.
const lockFile = "/run/diskforge-e2e.lock"

// Start brings the whole cluster up; on failure everything started is torn down again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(opts.RepoRoot, ".cache", "e2e-bin")
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = filepath.Join(opts.RepoRoot, "_output", "images")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the local cluster needs root (containerd, kubelets, mounts, loop devices)")
	}
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("another e2e cluster runs on this host (%s is locked)", lockFile)
	}
	work, err := os.MkdirTemp("", "diskforge-e2e-")
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	c := &Cluster{opts: opts, info: Info{WorkDir: work, TestImage: TestImage}, lock: lock}
	ctx, c.cancel = context.WithCancel(ctx)
	if err := c.startAll(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startAll(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"host", c.prepareHost},
		{"control plane", c.startControlPlane},
		{"nodes", c.startNodes},
		{"ssh", c.startSSH},
		{"cluster objects", c.applyManifests},
		{"fakecloud", c.waitCloud},
		{"workloads", func(ctx context.Context) error {
			if err := c.applyWorkloads(ctx); err != nil {
				return err
			}
			return c.waitWorkloads(ctx)
		}},
		{"registration", c.waitRegistered},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		c.logf("%s up in %s", s.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// prepareHost records what the run must restore, creates the fixed host paths nodes bind onto, and sets up the
// network.
func (c *Cluster) prepareHost(context.Context) error {
	var err error
	if c.host, err = captureHost(); err != nil {
		return err
	}
	for _, d := range nodeHostDirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			c.host.createdDirs = append(c.host.createdDirs, d)
		}
	}
	repoList := filepath.Join(c.info.WorkDir, "repo-list.yaml")
	if err := os.WriteFile(repoList, []byte(repoListYAML), 0o644); err != nil {
		return err
	}
	c.info.RepoList = repoList
	return c.setupNetwork()
}

// Stop tears everything down in reverse order and leaves the host as the run found it.
func (c *Cluster) Stop() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true // from here on nothing starts: c.start refuses
	procs := slices.Clone(c.procs)
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	c.cancel()
	// The SSH endpoints first: their commands end, and none acts on a node any more.
	if c.ssh != nil {
		c.ssh.close()
	}
	// Control plane controllers and kubelets first, so nothing restarts what goes; then the pods, through the
	// runtime; then the runtimes, the API server and etcd.
	for i := len(procs) - 1; i >= 0; i-- {
		if p := procs[i]; p.role == roleKubelet || p.role == roleController {
			p.stop(15 * time.Second)
		}
	}
	for _, n := range nodes {
		if err := c.removePods(n); err != nil {
			c.logf("%s: remove pods: %v", n.info.Name, err)
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(15 * time.Second)
	}
	for _, n := range nodes {
		killShims(n.socket, c.logf)
	}
	for i := len(c.undo) - 1; i >= 0; i-- {
		if err := c.undo[i](); err != nil {
			c.logf("teardown: %v", err)
		}
	}
	if c.host != nil {
		c.host.restore(c.info.WorkDir, c.logf)
	}
	if c.opts.LogsDir != "" {
		n, err := saveLogs(c.info.WorkDir, c.opts.LogsDir)
		if err != nil {
			c.logf("save the logs: %v", err)
		}
		c.logf("%d logs saved in %s", n, c.opts.LogsDir)
	}
	if c.opts.KeepWorkDir {
		c.logf("work dir kept: %s", c.info.WorkDir)
	} else if err := os.RemoveAll(c.info.WorkDir); err != nil {
		c.logf("remove work dir: %v", err)
	}
	_ = os.Remove(lockFile)
	_ = c.lock.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// poll calls cond until it holds, ctx ends or timeout passes; last explains a timeout.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Cluster) adminClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.info.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
