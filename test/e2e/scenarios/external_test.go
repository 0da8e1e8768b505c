//go:build e2e

package scenarios

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/test/e2e/external/suitereport"
)

// The external storage suite's specs are named "External Storage [Driver: disk.csi.diskforge.io]
// [Testpattern: <pattern>] [<tags>] <suite> <test>" (e2e.test -ginkgo.dry-run -ginkgo.v lists them). ciSpecs are
// the subset make e2e runs, by their full names: provisioning with a clone as data source, data kept on filesystem
// and block volumes, exec from a volume, online (xfs) and offline (default fs, ext4) expansion, snapshot and
// restore, a volume group snapshot, topology, CSINode limits, two volumes across nodes, pods sharing a volume, fsGroup, and two
// disruptive specs that stop kubelet over SSH (a pod deleted while kubelet is down has its volume unmounted when
// kubelet returns; data written before a kubelet restart is readable after it). About 7 minutes here, of which the
// disruptive two take 1 (23 s and 34 s). The run must run exactly these and each must pass: a spec renamed
// upstream (which the focus then no longer selects), one the suite skips, or one more that the focus selects fails
// it. make e2e-conformance runs the whole suite but its disruptive specs; make e2e-disruptive runs those.
var ciSpecs = []string{
	driverSpec + "[Testpattern: Dynamic PV (default fs)] provisioning should provision storage with pvc data source",
	driverSpec + "[Testpattern: Dynamic PV (default fs)] volumes should store data",
	driverSpec + "[Testpattern: Dynamic PV (default fs)] volumes should allow exec of files on the volume",
	driverSpec + "[Testpattern: Dynamic PV (block volmode)] volumes should store data",
	driverSpec + "[Testpattern: Dynamic PV (xfs)] [Slow] volume-expand should resize volume when PVC is edited while pod is using it",
	driverSpec + "[Testpattern: Dynamic PV (default fs)(allowExpansion)] volume-expand Verify if offline PVC expansion works",
	driverSpec + "[Testpattern: Dynamic Snapshot (delete policy)] snapshottable [Feature:VolumeSnapshotDataSource] volume snapshot controller should check snapshot fields, check restore correctly works after modifying source data, check deletion (persistent)",
	driverSpec + "[Testpattern:  (delete policy)] volumegroupsnapshottable-stress [Feature:volumegroupsnapshot] should support volume group snapshotting of StatefulSet volumes repeatedly [Slow] [Serial]",
	driverSpec + "[Testpattern: Dynamic PV (delayed binding)] topology should provision a volume and schedule a pod with AllowedTopologies",
	driverSpec + "[Testpattern: Dynamic PV (delayed binding)] topology should fail to schedule a pod which has topologies that conflict with AllowedTopologies",
	driverSpec + "[Testpattern: Dynamic PV (filesystem volmode)] volumeLimits should verify that all csinodes have volume limits",
	driverSpec + "[Testpattern: Dynamic PV (block volmode)] multiVolume [Slow] should access to two volumes with different volume mode and retain data across pod recreation on different node",
	driverSpec + "[Testpattern: Dynamic PV (filesystem volmode)] multiVolume [Slow] should concurrently access the single volume from pods on the same node",
	driverSpec + "[Testpattern: Dynamic PV (block volmode)] multiVolume [Slow] should concurrently access the single volume from pods on the same node",
	driverSpec + "[Testpattern: Dynamic PV (default fs)] fsgroupchangepolicy (OnRootMismatch)[LinuxOnly], pod created with an initial fsgroup, new pod fsgroup applied to volume contents",
	driverSpec + "[Testpattern: Dynamic PV (default fs)] subPath should unmount if pod is gracefully deleted while kubelet is down [Disruptive] [Slow] [LinuxOnly]",
	driverSpec + "[Testpattern: Dynamic PV (filesystem volmode)] disruptive [Disruptive] [LinuxOnly] Should test that pv written before kubelet restart is readable after restart.",
}

// ciRunnable is ciSpecs as this run can run them: the disruptive specs need the nodes' SSH endpoints, which only the
// local cluster serves (with -kubeconfig they are left out).
func ciRunnable() []string {
	if env.ssh.KeyFile != "" {
		return ciSpecs
	}
	var specs []string
	for _, name := range ciSpecs {
		if !strings.Contains(name, "[Disruptive]") {
			specs = append(specs, name)
		}
	}
	return specs
}

// driverSpec begins the name of each spec the suite runs against the driver.
const driverSpec = "External Storage [Driver: disk.csi.diskforge.io] "

// ciFocus selects ciSpecs: each name in full, to the end of the spec's text. ginkgo matches the focus against
// the suite's description, a space and the spec's text, so the start is left open.
func ciFocus(specs []string) string {
	quoted := make([]string, len(specs))
	for i, name := range specs {
		quoted[i] = regexp.QuoteMeta(name)
	}
	return "(?:" + strings.Join(quoted, "|") + ")$"
}

var (
	externalFlag  = flag.Bool("external", true, "run Kubernetes' external storage suite (e2e.test) after the scenarios")
	externalFocus = flag.String("external-focus", "", "ginkgo focus within the external storage suite's specs; "+
		"empty: the CI subset (ciSpecs), which must run exactly and pass")
	externalSkip = flag.String("external-skip", `\[Disruptive\]|\[Serial\]`, "ginkgo skip of the external storage suite "+
		"with -external-focus (the CI subset names its specs, disruptive ones included, and skips none); the "+
		"disruptive specs reach the nodes over SSH, which the local cluster serves")
	externalTimeout = flag.Duration("external-timeout", 2*time.Hour, "ginkgo's timeout for the external storage suite: "+
		"then it interrupts the running spec, cleans up and reports what ran")
	externalMarkdown = flag.String("external-markdown", "", "also write the run's Markdown summary to this file "+
		"(make e2e-conformance: test/e2e/external/conformance.md)")
)

// TestExternalStorage runs Kubernetes' own storage suite, e2e.test v1.36.3 built with hack/build-e2e-tools.sh,
// against the driver as a cluster runs it, with test/e2e/external/driver.yaml as the test driver. Each run keeps
// its directory under _output/e2e-external (ginkgo's JSON report, run.json, e2e.test's log and summary.md, the
// Markdown of test/e2e/external/suitereport: per test pattern and suite, failures and skips with their reasons).
func TestExternalStorage(t *testing.T) {
	if !*externalFlag {
		t.Skip("-external=false")
	}
	if env.skip != "" {
		if testutil.InCI() {
			t.Fatalf("%s (CI must run the external storage suite)", env.skip)
		}
		t.Skip(env.skip)
	}
	root := env.root
	if root == "" { // -kubeconfig: still in the package directory
		var err error
		if root, err = repoRoot(); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, ".cache", "e2e-bin", "e2e.test")
	if *binDirFlag != "" {
		// Absolute: the command runs in root (cmd.Dir below).
		var err error
		if bin, err = filepath.Abs(filepath.Join(*binDirFlag, "e2e.test")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v (run hack/build-e2e-tools.sh)", err)
	}
	ciSubset := *externalFocus == ""
	specs := ciRunnable()
	focus, skip, kind := ciFocus(specs), "", "ci"
	if !ciSubset {
		focus, skip, kind = "External.Storage.*("+*externalFocus+")", *externalSkip, "focus"
	} else if len(specs) < len(ciSpecs) {
		t.Logf("no SSH to the nodes (-kubeconfig): the CI subset leaves its %d disruptive specs out", len(ciSpecs)-len(specs))
	}
	if *externalMarkdown != "" {
		kind = "conformance"
	}
	start := time.Now()
	runDir := filepath.Join(root, "_output", "e2e-external", kind+"-"+runStamp(start))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	driverYAML := filepath.Join(root, "test", "e2e", "external", "driver.yaml")
	args := []string{
		"-kubeconfig=" + env.kubeconfig,
		"-storage.testdriver=" + driverYAML,
		"-ginkgo.focus=" + focus,
		"-ginkgo.timeout=" + externalTimeout.String(), "-ginkgo.v", "-ginkgo.no-color",
		"-ginkgo.json-report=" + filepath.Join(runDir, suitereport.ReportFile),
		"-report-dir=" + runDir, "-provider=local", "-node-os-distro=debian",
		"-allowed-not-ready-nodes=0", "-system-pods-startup-timeout=2m", "-minStartupPods=0",
	}
	if skip != "" { // an empty -ginkgo.skip would skip every spec
		args = append(args, "-ginkgo.skip="+skip)
	}
	// run.json: the command, with the run's own paths as names, and the versions of what runs.
	shown := strings.NewReplacer(runDir, "<run-dir>", env.kubeconfig, "<kubeconfig>", root+"/", "")
	run := suitereport.Run{Command: []string{"e2e.test"},
		Versions: runVersions(t.Context(), root, bin, env.kubeconfig, driverYAML)}
	for _, a := range args {
		run.Command = append(run.Command, shown.Replace(a))
	}
	if err := writeJSON(filepath.Join(runDir, suitereport.RunFile), run); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(t.Context(), bin, args...)
	// driver.yaml's GroupSnapshotClass.FromFile is read as given (os.ReadFile, not the framework's testfiles):
	// relative to the repository root.
	cmd.Dir = root
	// The disruptive specs reach the nodes over SSH (test/e2e/framework/ssh reads the key and user from here).
	cmd.Env = append(append(os.Environ(), "KUBE_TEST_REPO_LIST="+env.repoList), env.ssh.Env()...)
	logFile := filepath.Join(runDir, "e2e.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	t.Logf("running %s %s (log %s)", bin, strings.Join(args, " "), logFile)
	runErr := cmd.Start()
	if runErr == nil {
		external.set(cmd.Process)
		runErr = cmd.Wait()
		external.set(nil)
	}
	took := time.Since(start)
	recordTiming("external storage suite", result(runErr == nil), took)
	summary, err := suitereport.Load(runDir)
	if err != nil {
		t.Fatalf("e2e.test: %v; its report: %v; see %s", runErr, err, logFile)
	}
	writeSummaries(t, summary, root, runDir)
	c := summary.Counts()
	t.Logf("external storage suite in %s: %d passed, %d failed, %d skipped, %d not reached (%s)", took.Round(time.Second),
		c[suitereport.Passed], c[suitereport.Failed], c[suitereport.Skipped], c[suitereport.NotReached],
		filepath.Join(runDir, "summary.md"))
	if ciSubset {
		if err := summary.CheckExactly(specs); err != nil {
			t.Fatalf("the CI subset must run exactly its %d specs (ciSpecs) and pass each:\n%v", len(specs), err)
		}
	} else {
		if c[suitereport.Failed] > 0 || summary.SuiteNodeFailures() > 0 {
			t.Errorf("%d specs and %d suite-level nodes failed: see %s", c[suitereport.Failed],
				summary.SuiteNodeFailures(), filepath.Join(runDir, "summary.md"))
		}
		if c[suitereport.Passed] == 0 {
			t.Error("e2e.test passed no spec: does the focus match any?")
		}
	}
	if runErr != nil {
		t.Fatalf("e2e.test: %v; see %s", runErr, logFile)
	}
}

// writeSummaries writes the run's Markdown into its directory, and to -external-markdown when given.
func writeSummaries(t *testing.T, s *suitereport.Summary, root, runDir string) {
	t.Helper()
	rel, err := filepath.Rel(root, runDir)
	if err != nil {
		rel = runDir
	}
	o := suitereport.MarkdownOptions{Regenerate: "make e2e-conformance-md E2E_RUN_DIR=" + rel}
	if o.Notes, err = suitereport.LoadNotes(filepath.Join(root, "test", "e2e", "external", "notes.yaml")); err != nil {
		t.Error(err) // the summary is still worth writing
	}
	for _, out := range []string{filepath.Join(runDir, "summary.md"), *externalMarkdown} {
		if out == "" {
			continue
		}
		if err := s.WriteMarkdownFile(out, o); err != nil {
			t.Error(err)
		} else {
			t.Logf("wrote %s", out)
		}
	}
}

// runningSuite is the running e2e.test, which a signal or the timeout guard kills before the cluster goes:
// os.Exit skips the test's context, which would have.
type runningSuite struct {
	mu sync.Mutex
	p  *os.Process
}

var external runningSuite

func (e *runningSuite) set(p *os.Process) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.p = p
}

func stopExternal() {
	external.mu.Lock()
	defer external.mu.Unlock()
	if external.p != nil {
		logf("killing e2e.test (pid %d)", external.p.Pid)
		_ = external.p.Kill()
	}
}
