//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/diskforge/diskforge/test/e2e/cluster"
)

var (
	kubeconfigFlag = flag.String("kubeconfig", "",
		"run against this cluster (kind, …) instead of starting the local one")
	cloudURLFlag = flag.String("cloud-url", "",
		"with -kubeconfig: fakecloud's base URL (e.g. through a port-forward); empty turns the cloud checks off")
	cloudKeyFlag = flag.String("cloud-access-key-id", os.Getenv("CLOUD_ACCESS_KEY_ID"),
		"with -cloud-url: the key fakecloud checks EC2 signatures with (the aws-credentials Secret's key_id)")
	cloudSecretFlag = flag.String("cloud-secret-access-key", os.Getenv("CLOUD_SECRET_ACCESS_KEY"),
		"with -cloud-url: its secret (access_key)")
	cloudAdminTokenFlag = flag.String("cloud-admin-token", os.Getenv("CLOUD_ADMIN_TOKEN"),
		"with -cloud-url: fakecloud's admin token (admin_token)")
	hostChecksFlag = flag.Bool("host-checks", false,
		"with -kubeconfig: check mounts, devices and loop devices on this machine (kubelets must run on it)")
	kubeletRootFlag = flag.String("kubelet-root-dir", "/var/lib/kubelet",
		"with -kubeconfig and -host-checks: every node's kubelet root directory")
	cloudVolumesDirFlag = flag.String("cloud-volumes-dir", "",
		"with -kubeconfig and -host-checks: fakecloud's volume files directory, checked for loop devices at teardown")
	binDirFlag = flag.String("bin-dir", "",
		"local cluster: the Kubernetes and sidecar binaries (default <repo>/.cache/e2e-bin)")
	testImageFlag = flag.String("test-image", "busybox:1.37",
		"with -kubeconfig: the application pods' image (busybox: sh, dd, df, sha256sum, blockdev)")
	keepWorkDirFlag = flag.Bool("keep-work-dir", false,
		"local cluster: keep its work directory (logs, state) after the run")
	logsDirFlag = flag.String("logs-dir", "",
		"local cluster: copy its logs (control plane, kubelets, containers) into <dir>/local-<time> after the run")
)

// TestMain starts the local cluster unless -kubeconfig names one, runs the scenarios and prints their timings.
// The cluster is stopped at the end, on SIGINT/SIGTERM, and shortly before the test binary's -timeout fires.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(mainRun(m))
}

func mainRun(m *testing.M) int {
	if *kubeconfigFlag != "" {
		env = environment{kubeconfig: findKubeconfig(*kubeconfigFlag), cloudURL: *cloudURLFlag,
			cloud:      cluster.CloudCredentials{AccessKeyID: *cloudKeyFlag, SecretAccessKey: *cloudSecretFlag, AdminToken: *cloudAdminTokenFlag},
			hostChecks: *hostChecksFlag, cloudVolumesDir: *cloudVolumesDirFlag,
			testImage: *testImageFlag}
		env.kubeletRoot = *kubeletRootFlag
		if env.hostChecks {
			env.scope = []string{env.kubeletRoot}
		}
		env.resolvePaths()
		logf("using %s (cloud checks %s, host checks %s)", env.kubeconfig, onOff(env.cloudURL != ""),
			onOff(env.hostChecks))
		installStopHandlers()
		code := m.Run()
		printSummary()
		return code
	}
	if os.Geteuid() != 0 {
		env.skip = "the local cluster needs root (kubelets mount, fakecloud binds loop devices); " +
			"run as root or pass -kubeconfig"
		return m.Run()
	}
	root, err := repoRoot()
	if err != nil {
		logf("%v", err)
		return 1
	}
	binDir := *binDirFlag
	if binDir != "" {
		if binDir, err = filepath.Abs(binDir); err != nil {
			logf("-bin-dir: %v", err)
			return 1
		}
	}
	// Kubelets on the fake runtime delete every file of their working directory when they remove a container
	// (the fake reports no log path, and kubelet removes "<log path>*"): they, and so the test binary whose
	// directory they inherit, must not run in the package directory.
	scratch, err := os.MkdirTemp("", "diskforge-e2e-cwd-")
	if err == nil {
		err = os.Chdir(scratch)
	}
	if err != nil {
		logf("scratch working directory: %v", err)
		return 1
	}
	local.scratch = scratch
	// The context lives as long as the cluster's processes; a signal during the start cancels it, and Start then
	// tears down what it had begun.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	local.begin(cancel)
	installStopHandlers()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{RepoRoot: root, BinDir: binDir, Logf: clusterLogf,
		KeepWorkDir: *keepWorkDirFlag, LogsDir: runLogsDir(*logsDirFlag, time.Now())})
	recordTiming("cluster start", result(err == nil), time.Since(start))
	local.started(c)
	if err != nil {
		logf("start the local cluster: %v", err)
		local.stop()
		printSummary()
		return 1
	}
	info := c.Info()
	env = environment{local: true, root: root, kubeconfig: info.Kubeconfig, cloudURL: info.CloudURL, cloud: info.Cloud, hostChecks: true,
		scope: []string{"/var/lib/kubelet"}, cloudVolumesDir: info.CloudVolumesDir, nodes: info.Nodes,
		testImage: info.TestImage, repoList: info.RepoList, ssh: info.SSH}
	env.resolvePaths()
	logf("local cluster up in %s: kubeconfig %s, cloud %s, work dir %s", time.Since(start).Round(time.Millisecond),
		info.Kubeconfig, info.CloudURL, info.WorkDir)
	code := m.Run()
	local.stop()
	printSummary()
	return code
}

// localCluster is the local cluster's life. Whoever stops it first (the end of the run, a signal, the timeout
// guard) stops it, and the others wait for that; stopped during its start, it cancels the start.
type localCluster struct {
	mu       sync.Mutex
	cancel   context.CancelFunc // cancels the start (and the processes' context)
	starting chan struct{}      // closed when Start has returned
	c        *cluster.Cluster
	once     sync.Once
	// scratch is the working directory of the test binary and so of the cluster's processes; it goes with them.
	scratch string
}

var local = &localCluster{starting: make(chan struct{})}

func (l *localCluster) begin(cancel context.CancelFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel = cancel
}

func (l *localCluster) started(c *cluster.Cluster) {
	l.mu.Lock()
	l.c = c
	l.mu.Unlock()
	close(l.starting)
}

func (l *localCluster) stop() {
	l.mu.Lock()
	cancel := l.cancel
	l.mu.Unlock()
	if cancel == nil {
		return // not the local cluster
	}
	l.once.Do(func() {
		select {
		case <-l.starting:
		default:
			logf("cancelling the cluster's start")
			cancel()
			<-l.starting
		}
		l.mu.Lock()
		c := l.c
		l.mu.Unlock()
		if c != nil {
			start := time.Now()
			logf("stopping the local cluster")
			c.Stop()
			recordTiming("cluster stop", "ok", time.Since(start))
		}
		if l.scratch != "" {
			_ = os.RemoveAll(l.scratch)
		}
	})
}

// installStopHandlers makes SIGINT/SIGTERM, and the approach of -test.timeout (whose panic would skip every
// cleanup), release what the run holds: the namespace of the scenarios on a cluster we do not own, the whole
// local cluster otherwise.
func installStopHandlers() {
	bail := func(why string, code int) {
		logf("%s: cleaning up", why)
		abortActiveRun()
		stopExternal()
		local.stop()
		printSummary()
		os.Exit(code)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs) // a second ^C kills at once
		bail(s.String(), 130)
	}()
	if f := flag.Lookup("test.timeout"); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			if d, ok := g.Get().(time.Duration); ok && d > 3*time.Minute {
				time.AfterFunc(d-time.Minute, func() {
					var b bytes.Buffer
					_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
					logf("test timeout %s is one minute away; goroutines:\n%s", d, b.String())
					bail("test timeout", 1)
				})
			}
		}
	}
}

// findKubeconfig resolves a relative -kubeconfig: go test runs the binary in the package directory, while the
// path was probably meant from test/e2e or from the repository root.
func findKubeconfig(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	for _, dir := range []string{".", "..", filepath.Join("..", "..", "..")} {
		if abs, err := filepath.Abs(filepath.Join(dir, path)); err == nil {
			if _, err := os.Stat(abs); err == nil {
				return abs
			}
		}
	}
	return path
}

// repoRoot is three levels up from the package directory (test/e2e/scenarios), where go test runs the binary.
func repoRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/diskforge/diskforge\n")) {
		return "", fmt.Errorf("repository root %s: no go.mod of github.com/diskforge/diskforge there (run from test/e2e/scenarios)", root)
	}
	return root, nil
}

func clusterLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s cluster: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// runLogsDir is where this run's cluster logs go: a directory per run under dir, none when dir is empty.
func runLogsDir(dir string, now time.Time) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "local-"+runStamp(now))
}

// runStamp names a run's output directories by its start, in UTC, sorting as time does.
func runStamp(t time.Time) string { return t.UTC().Format("20060102T150405Z") }
