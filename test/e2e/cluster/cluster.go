package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// DriverName is the CSI driver the cluster runs.
const DriverName = "disk.csi.diskforge.io"

// Options shape a local cluster run.
type Options struct {
	// RepoRoot is the repository; the driver and fakecloud binaries are built into RepoRoot/bin.
	RepoRoot string
	// BinDir holds the Kubernetes and sidecar binaries and the snapshot CRDs; default RepoRoot/.cache/e2e-bin.
	BinDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
	// KeepWorkDir keeps logs and state after Stop.
	KeepWorkDir bool
}

// Cluster is a running local cluster.
type Cluster struct {
	opts   Options
	info   Info
	pki    *pki
	procs  []*proc
	client kubernetes.Interface
	server string
	cancel context.CancelFunc
	// hostDirs are directories kubelets create at fixed host paths that did not exist before the run.
	hostDirs []string
	// workloads are the rendered Deployments and DaemonSets, run as local processes.
	workloads []workload
	stopped   bool
}

// Info describes the running cluster.
func (c *Cluster) Info() Info { return c.info }

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

// nodeSpecs are the cluster's nodes: two in zone a, one in zone b.
var nodeSpecs = []NodeInfo{
	{Name: "node-a1", Zone: "us-east-1a", InstanceID: "i-0e2e0000000000a01"},
	{Name: "node-a2", Zone: "us-east-1a", InstanceID: "i-0e2e0000000000a02"},
	{Name: "node-b1", Zone: "us-east-1b", InstanceID: "i-0e2e0000000000b01"},
}

// Start brings the whole cluster up; on failure everything started is torn down again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(opts.RepoRoot, ".cache", "e2e-bin")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the local cluster needs root (kubelets mount, fakecloud binds loop devices)")
	}
	work, err := os.MkdirTemp("", "diskforge-e2e-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, info: Info{WorkDir: work}}
	// Kubelets write a few fixed host paths whatever their root dir; remember which ones the run creates.
	for _, d := range []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers"} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			c.hostDirs = append(c.hostDirs, d)
		}
	}
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
		{"control plane", c.startControlPlane},
		{"cluster objects", c.applyManifests},
		{"fakecloud", c.startCloud},
		{"nodes", c.startNodes},
		{"controller", c.startController},
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

// Stop tears everything down in reverse order and releases every mount and loop device of the run.
func (c *Cluster) Stop() {
	if c.stopped {
		return
	}
	c.stopped = true
	c.cancel()
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(15 * time.Second)
	}
	releaseHost(c.info.WorkDir, c.logf)
	for _, d := range c.hostDirs {
		if err := os.RemoveAll(d); err != nil {
			c.logf("remove %s: %v", d, err)
		}
	}
	if c.opts.KeepWorkDir {
		c.logf("work dir kept: %s", c.info.WorkDir)
		return
	}
	if err := os.RemoveAll(c.info.WorkDir); err != nil {
		c.logf("remove work dir: %v", err)
	}
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
		case <-time.After(200 * time.Millisecond):
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
