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
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
)

// The external storage suite's specs are named "External Storage [Driver: disk.csi.diskforge.io]
// [Testpattern: <pattern>] <suite> <test>". CIFocus is the subset make e2e runs; make e2e-conformance runs the
// rest (-external-focus=External.Storage -external-skip=<CIFocus>).
const ciFocus = `\[Testpattern: Dynamic PV \(default fs\)\] (provisioning should provision storage with pvc data source|volumes should store data)|` +
	`\[Testpattern: Dynamic PV \(block volmode\)\] volumes should store data|` +
	`\[Testpattern: Dynamic PV \(xfs\)\]\[Slow\] volume-expand should resize volume when PVC is edited while pod is using it|` +
	`\[Testpattern: Dynamic Snapshot \(delete policy\)\] snapshottable\[Feature:VolumeSnapshotDataSource\] volume snapshot controller +should check snapshot fields, check restore correctly works, check deletion \(ephemeral\)|` +
	`\[Testpattern: Dynamic PV \(default fs\)\] topology should provision a volume and schedule a pod with AllowedTopologies`

var (
	externalFlag  = flag.Bool("external", true, "run Kubernetes' external storage suite (e2e.test) after the scenarios")
	externalFocus = flag.String("external-focus", ciFocus, "ginkgo focus of the external storage suite")
	externalSkip  = flag.String("external-skip", `\[Disruptive\]|\[Serial\]`, "ginkgo skip of the external storage suite")
	externalRest  = flag.Bool("external-rest", false, "run every spec of the external storage suite but CI's subset and the disruptive ones (make e2e-conformance)")
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
	if *externalRest {
		focus, skip = ".", ciFocus+`|\[Disruptive\]`
	}
	out := t.TempDir()
	args := []string{
		"-kubeconfig=" + env.kubeconfig,
		"-storage.testdriver=" + filepath.Join(root, "test", "e2e", "external", "driver.yaml"),
		"-ginkgo.focus=External.Storage.*(" + focus + ")",
		"-ginkgo.skip=" + skip,
		"-ginkgo.timeout=2h", "-ginkgo.v", "-ginkgo.no-color",
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
	runErr := cmd.Run()
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

type suiteCounts struct {
	byPattern               map[string]*[3]int // passed, failed, skipped
	passed, failed, skipped int
	failures                []string
}

var patternRE = regexp.MustCompile(`\[Testpattern: ([^\]]*)\] ([^ \[]+)`)

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
			m := patternRE.FindStringSubmatch(tc.Name)
			if m == nil {
				continue // the suite's own setup and report nodes
			}
			key := m[1] + " / " + m[2]
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
