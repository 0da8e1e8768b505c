//go:build e2e

package scenarios

import (
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
)

// The external storage suite's specs are named "External Storage [Driver: disk.csi.diskforge.io]
// [Testpattern: <pattern>] [<tags>] <suite> <test>" (e2e.test -ginkgo.dry-run -ginkgo.v lists them). ciSpecs, one
// spec each, are the subset make e2e runs: provisioning with a clone as data source, data kept on filesystem and
// block volumes, exec from a volume, online (xfs) and offline (default fs, ext4) expansion, snapshot and restore,
// topology, CSINode limits, two volumes across nodes, pods sharing a volume, fsGroup. About 5½ minutes here.
// make e2e-conformance runs the whole suite but its disruptive specs.
var ciSpecs = []string{
	`\[Testpattern: Dynamic PV \(default fs\)\] provisioning should provision storage with pvc data source$`,
	`\[Testpattern: Dynamic PV \(default fs\)\] volumes should store data$`,
	`\[Testpattern: Dynamic PV \(default fs\)\] volumes should allow exec of files on the volume$`,
	`\[Testpattern: Dynamic PV \(block volmode\)\] volumes should store data$`,
	`\[Testpattern: Dynamic PV \(xfs\)\] \[Slow\] volume-expand should resize volume when PVC is edited while pod is using it`,
	`\[Testpattern: Dynamic PV \(default fs\)\(allowExpansion\)\] volume-expand Verify if offline PVC expansion works`,
	`\[Testpattern: Dynamic Snapshot \(delete policy\)\] snapshottable \[Feature:VolumeSnapshotDataSource\] volume snapshot controller +should check snapshot fields, check restore correctly works after modifying source data, check deletion \(persistent\)`,
	`\[Testpattern: Dynamic PV \(delayed binding\)\] topology should`,
	`\[Testpattern: Dynamic PV \(filesystem volmode\)\] volumeLimits should verify that all csinodes have volume limits`,
	`\[Testpattern: Dynamic PV \(block volmode\)\] multiVolume \[Slow\] should access to two volumes with different volume mode and retain data across pod recreation on different node`,
	`\[Testpattern: Dynamic PV \(filesystem volmode\)\] multiVolume \[Slow\] should concurrently access the single volume from pods on the same node`,
	`\[Testpattern: Dynamic PV \(block volmode\)\] multiVolume \[Slow\] should concurrently access the single volume from pods on the same node`,
	`\[Testpattern: Dynamic PV \(default fs\)\] fsgroupchangepolicy \(OnRootMismatch\)\[LinuxOnly\], pod created with an initial fsgroup, new pod fsgroup applied to volume contents`,
}

// ciFocus selects ciSpecs.
var ciFocus = strings.Join(ciSpecs, "|")

var (
	externalFlag    = flag.Bool("external", true, "run Kubernetes' external storage suite (e2e.test) after the scenarios")
	externalFocus   = flag.String("external-focus", ciFocus, "ginkgo focus of the external storage suite")
	externalSkip    = flag.String("external-skip", `\[Disruptive\]|\[Serial\]`, "ginkgo skip of the external storage suite")
	externalTimeout = flag.Duration("external-timeout", 2*time.Hour, "ginkgo's timeout for the external storage suite: "+
		"then it interrupts the running spec, cleans up and reports what ran")
)

// TestExternalStorage runs Kubernetes' own storage suite, e2e.test v1.36.3 built with hack/build-e2e-tools.sh,
// against the driver as a cluster runs it, with test/e2e/external/driver.yaml as the test driver, and reports
// pass/fail/skip per test pattern.
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
		bin = filepath.Join(*binDirFlag, "e2e.test")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v (run hack/build-e2e-tools.sh)", err)
	}
	focus, skip := *externalFocus, *externalSkip
	out := t.TempDir()
	args := []string{
		"-kubeconfig=" + env.kubeconfig,
		"-storage.testdriver=" + filepath.Join(root, "test", "e2e", "external", "driver.yaml"),
		"-ginkgo.focus=External.Storage.*(" + focus + ")",
		"-ginkgo.skip=" + skip,
		"-ginkgo.timeout=" + externalTimeout.String(), "-ginkgo.v", "-ginkgo.no-color",
		"-report-dir=" + out, "-provider=local", "-node-os-distro=debian",
		"-allowed-not-ready-nodes=0", "-system-pods-startup-timeout=2m", "-minStartupPods=0",
		"-ginkgo.junit-report=" + filepath.Join(out, "junit.xml"),
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+env.repoList)
	logFile := filepath.Join(os.TempDir(), fmt.Sprintf("diskforge-e2e-external-%d.log", time.Now().Unix()))
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	start := time.Now()
	t.Logf("running %s %s (log %s)", bin, strings.Join(args, " "), logFile)
	runErr := cmd.Start()
	if runErr == nil {
		external.set(cmd.Process)
		runErr = cmd.Wait()
		external.set(nil)
	}
	took := time.Since(start)
	counts, err := junitCounts(filepath.Join(out, "junit.xml"))
	if err != nil {
		t.Fatalf("e2e.test: %v; report: %v; see %s", runErr, err, logFile)
	}
	t.Logf("external storage suite in %s:\n%s", took.Round(time.Second), counts.table())
	recordTiming("external storage suite", result(runErr == nil), took)
	if runErr != nil || counts.failed > 0 {
		t.Fatalf("e2e.test: %v; %d failed (%s)", runErr, counts.failed, strings.Join(counts.failures, "; "))
	}
	if counts.passed == 0 {
		t.Fatal("e2e.test ran no spec: the focus matches nothing")
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

type suiteCounts struct {
	byPattern               map[string]*[3]int // passed, failed, skipped
	passed, failed, skipped int
	failures                []string
}

// patternRE finds a spec's pattern and suite; tags such as [Slow] may stand between them.
var patternRE = regexp.MustCompile(`\[Testpattern: ([^\]]*)\] (?:\[[^\]]*\] )*([^ \[]+)`)

// junitCounts reads ginkgo's JUnit report: counts per test pattern and suite, the failures' names.
func junitCounts(file string) (*suiteCounts, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	c := &suiteCounts{byPattern: map[string]*[3]int{}}
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			key := "(suite setup and teardown)" // the suite's own nodes, counted for their failures only
			m := patternRE.FindStringSubmatch(tc.Name)
			if m != nil {
				key = m[1] + " / " + m[2]
			} else if tc.Failure == nil && tc.Error == nil {
				continue
			}
			if c.byPattern[key] == nil {
				c.byPattern[key] = &[3]int{}
			}
			switch {
			case tc.Failure != nil || tc.Error != nil:
				c.byPattern[key][1]++
				c.failed++
				c.failures = append(c.failures, tc.Name)
			case tc.Skipped != nil || tc.Status == "skipped" || tc.Status == "pending":
				c.byPattern[key][2]++
				c.skipped++
			default:
				c.byPattern[key][0]++
				c.passed++
			}
		}
	}
	return c, nil
}

func (c *suiteCounts) table() string {
	keys := make([]string, 0, len(c.byPattern))
	for k := range c.byPattern {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%-70s %6s %6s %6s\n", "PATTERN / SUITE", "PASS", "FAIL", "SKIP")
	for _, k := range keys {
		v := c.byPattern[k]
		fmt.Fprintf(&b, "%-70s %6d %6d %6d\n", k, v[0], v[1], v[2])
	}
	fmt.Fprintf(&b, "%-70s %6d %6d %6d\n", "total", c.passed, c.failed, c.skipped)
	return b.String()
}
