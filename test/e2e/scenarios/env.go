//go:build e2e

package scenarios

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/diskforge/diskforge/test/e2e/cluster"
)

// environment is what TestMain learned or started; the scenarios read it through newRun.
type environment struct {
	local      bool
	kubeconfig string
	cloudURL   string // empty: cloud checks off
	// root is the repository, found before the local cluster's run leaves the package directory.
	root string
	// cloud are fakecloud's keys and admin token, when it checks them.
	cloud      cluster.CloudCredentials
	hostChecks bool
	// scope holds the directories whose mounts (below pods/ and plugins/kubernetes.io/csi/) and loop devices
	// belong to the run: the local cluster's work dir, or the kubelet root dir.
	scope []string
	// cloudVolumesDir holds fakecloud's volume files; loop devices backed by them belong to the run.
	cloudVolumesDir string
	// kubeletRoot is the kubelet root directory of nodes the harness does not describe (-kubeconfig).
	kubeletRoot string
	// nodes of the local cluster as the harness knows them; empty for -kubeconfig.
	nodes []cluster.NodeInfo
	// repoList is the local cluster's KUBE_TEST_REPO_LIST for Kubernetes' e2e suite.
	repoList string
	// ssh reaches the local cluster's nodes over SSH (e2e.test's KUBE_SSH_KEY_PATH, KUBE_SSH_USER); empty for
	// -kubeconfig, whose nodes the suite then reaches with its provider's defaults, if at all.
	ssh cluster.SSHInfo
	// testImage is the application pods' image: busybox, present on every node.
	testImage string
	// skip says why the scenarios cannot run here (not root for the local cluster).
	skip string
}

var env environment

// resolvePaths resolves symlinks in the host directories, as mountinfo and sysfs report real paths.
func (e *environment) resolvePaths() {
	for i, dir := range e.scope {
		e.scope[i] = realPath(dir)
	}
	e.cloudVolumesDir = realPath(e.cloudVolumesDir)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s e2e: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func result(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// timings are the rows of the summary printed after the run.
var timings struct {
	sync.Mutex
	rows []timing
}

type timing struct {
	name, result string
	took         time.Duration
}

func recordTiming(name, result string, took time.Duration) {
	timings.Lock()
	defer timings.Unlock()
	timings.rows = append(timings.rows, timing{name, result, took})
}

func printSummary() {
	timings.Lock()
	defer timings.Unlock()
	if len(timings.rows) == 0 {
		return
	}
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STEP\tRESULT\tTIME")
	var total time.Duration
	for _, r := range timings.rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.name, r.result, r.took.Round(10*time.Millisecond))
		total += r.took
	}
	fmt.Fprintf(w, "total\t\t%s\n", total.Round(10*time.Millisecond))
	_ = w.Flush()
	fmt.Fprintf(os.Stderr, "\ne2e timings:\n%s", b.String())
}
