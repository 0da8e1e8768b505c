package suitereport

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/run.md from the fixture")

// The fixture (testdata/run) is a small ginkgo report of the shape e2e.test writes: a pass, a failure, skips by
// the suite with reasons, a spec the timeout kept from running, one it interrupted, specs the focus or skip left
// out, a suite-level node that passed and one that failed.
const fixture = "testdata/run"

const driver = "External Storage [Driver: disk.csi.diskforge.io] "

func load(t *testing.T) *Summary {
	t.Helper()
	s, err := Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoadOutcomes(t *testing.T) {
	s := load(t)
	got := map[string]Spec{}
	for _, spec := range s.Specs {
		got[spec.Name] = spec
	}
	for _, tc := range []struct {
		name     string
		outcome  Outcome
		pattern  string
		suite    string
		reason   string // a prefix
		excluded bool   // not among the run's specs
	}{
		{name: driver + "[Testpattern: Dynamic PV (default fs)] volumes should store data",
			outcome: Passed, pattern: "Dynamic PV (default fs)", suite: "volumes"},
		{name: driver + "[Testpattern: Dynamic PV (xfs)] [Slow] volume-expand should resize volume when PVC is edited while pod is using it",
			outcome: Passed, pattern: "Dynamic PV (xfs)", suite: "volume-expand"},
		{name: driver + "[Testpattern: Dynamic PV (default fs)(allowExpansion)] volume-expand should resize volume when PVC is edited while pod is using it",
			outcome: Failed, pattern: "Dynamic PV (default fs)(allowExpansion)", suite: "volume-expand",
			reason: "failed at test/e2e/storage/testsuites/volume_expand.go:42: while waiting for fs resize to finish"},
		{name: driver + "[Testpattern: Dynamic PV (ntfs)] volumes should store data",
			outcome: Skipped, pattern: "Dynamic PV (ntfs)", suite: "volumes",
			reason: "Driver disk.csi.diskforge.io doesn't support ntfs -- skipping"},
		{name: driver + "[Testpattern: Dynamic PV (block volmode)] volumes should store data",
			outcome: NotReached, pattern: "Dynamic PV (block volmode)", suite: "volumes"},
		{name: driver + "[Testpattern: Dynamic PV (ext4)] multiVolume [Slow] should access to two volumes with the same volume mode and retain data across pod recreation on the same node",
			outcome: Failed, pattern: "Dynamic PV (ext4)", suite: "multiVolume", reason: "interrupted at test/e2e/storage/testsuites/multivolume.go:42: Interrupted by Timeout"},
		{name: "ReportAfterSuite Kubernetes e2e JUnit report", outcome: Failed, pattern: SuiteNodes,
			reason: "failed in ReportAfterSuite at test/e2e/framework/test_context.go:593: open /nonexistent/junit_01.xml"},
		{name: driver + "[Testpattern: Dynamic PV (default fs)] [Disruptive] disruptive should test that pv written before kubelet restart is readable after restart.",
			excluded: true},
		{name: "[sig-network] DNS should resolve DNS of partial qualified names", excluded: true},
		{name: "SynchronizedBeforeSuite", excluded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, ok := got[tc.name]
			if ok == tc.excluded {
				t.Fatalf("among the run's specs: %v, want %v", ok, !tc.excluded)
			}
			if tc.excluded {
				return
			}
			if spec.Outcome != tc.outcome || spec.Pattern != tc.pattern || spec.Suite != tc.suite ||
				!strings.HasPrefix(spec.Reason, tc.reason) || (tc.reason == "") != (spec.Reason == "") {
				t.Errorf("got %v, %q / %q, reason %q; want %v, %q / %q, reason %q…", spec.Outcome, spec.Pattern,
					spec.Suite, spec.Reason, tc.outcome, tc.pattern, tc.suite, tc.reason)
			}
		})
	}
	if c := s.Counts(); c != (Counts{2, 2, 3, 1}) {
		t.Errorf("counts %v, want [2 2 3 1] (passed, failed, skipped, not reached; suite nodes apart)", c)
	}
	if s.Total != 10 {
		t.Errorf("total %d, want 10 specs in e2e.test", s.Total)
	}
}

func TestCheckExactly(t *testing.T) {
	s := load(t)
	storeData := driver + "[Testpattern: Dynamic PV (default fs)] volumes should store data"
	expandXFS := driver + "[Testpattern: Dynamic PV (xfs)] [Slow] volume-expand should resize volume when PVC is edited while pod is using it"
	// passedOnly is the fixture with just its two passes: what a good CI run looks like.
	passedOnly := &Summary{}
	for _, spec := range s.Specs {
		if spec.Outcome == Passed {
			passedOnly.Specs = append(passedOnly.Specs, spec)
		}
	}
	for _, tc := range []struct {
		name    string
		summary *Summary
		names   []string
		want    []string // substrings of the error, each on a line of its own; none: no error
	}{
		{name: "exactly the listed specs passed", summary: passedOnly, names: []string{storeData, expandXFS}},
		{name: "a listed spec the focus no longer selects", summary: passedOnly,
			names: []string{storeData, expandXFS, driver + "[Testpattern: Dynamic PV (default fs)] volumes should store data again"},
			want:  []string{"did not run (the focus does not select it: renamed or removed upstream?): " + driver}},
		{name: "a spec that ran but is not listed", summary: passedOnly, names: []string{storeData},
			want: []string{"ran, but is not one of the 1 listed specs (passed): " + expandXFS}},
		{name: "skipped, failed, not reached and a suite failure", summary: s, names: []string{storeData, expandXFS,
			driver + "[Testpattern: Dynamic PV (ntfs)] volumes should store data",
			driver + "[Testpattern: Dynamic PV (default fs)(allowExpansion)] volume-expand should resize volume when PVC is edited while pod is using it",
			driver + "[Testpattern: Dynamic PV (block volmode)] volumes should store data"},
			want: []string{
				"skipped (Driver disk.csi.diskforge.io doesn't support ntfs -- skipping): " + driver,
				"failed (failed at test/e2e/storage/testsuites/volume_expand.go:42: while waiting for fs resize to finish): " + driver,
				"not reached (the suite ended first): " + driver,
				"ran, but is not one of the 5 listed specs (skipped): " + driver + "[Testpattern: Dynamic PV (ntfs)] volumes should allow exec",
				"ran, but is not one of the 5 listed specs (skipped): " + driver + "[Testpattern: Pre-provisioned PV (default fs)] volumes should store data",
				"ran, but is not one of the 5 listed specs (failed): " + driver + "[Testpattern: Dynamic PV (ext4)] multiVolume",
				"suite node failed (failed in ReportAfterSuite at test/e2e/framework/test_context.go:593",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.summary.CheckExactly(tc.names)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for _, w := range tc.want {
				found := false
				for _, l := range lines {
					found = found || strings.HasPrefix(l, w)
				}
				if !found {
					t.Errorf("no problem starts %q in:\n%v", w, err)
				}
			}
		})
	}
}

// TestMarkdown compares the fixture's Markdown with testdata/run.md (go test -run TestMarkdown -update rewrites
// it), and checks the parts a reader relies on.
func TestMarkdown(t *testing.T) {
	notes, err := LoadNotes("testdata/notes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "conformance.md")
	if err := load(t).WriteMarkdownFile(out, MarkdownOptions{Regenerate: "make e2e-conformance-md", Notes: notes}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	golden := fixture + ".md"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("Markdown differs from %s (rerun with -update and review the diff):\n%s", golden, got)
	}
	for _, part := range []string{
		"| date | 2026-12-01 04:00 UTC |",
		"| duration | 1h52m31s |",
		"| e2e.test | v1.36.3 |",
		"10 in e2e.test, 8 selected by the focus and skip: **2 passed, 2 failed, 3 skipped, 1 not reached**; 1 suite-level node failed",
		"| suite | failed (Suite Timeout Elapsed) |",
		"    '-ginkgo.skip=\\[Disruptive\\]' \\\n",
		"| Dynamic PV (ntfs) | volumes |  |  | 2 |  | Driver disk.csi.diskforge.io doesn't support ntfs -- skipping (2) |",
		"| Dynamic PV (block volmode) | volumes |  |  |  | 1 |  |",
		"| ReportAfterSuite Kubernetes e2e JUnit report | failed in ReportAfterSuite at ",
		"| **total** | | 2 | 2 | 3 | 1 | |",
		"| 2 | Driver disk.csi.diskforge.io doesn't support ntfs -- skipping | Not offered. |",
		"This machine refuses online ext4 growth.",
		"## Notes that matched nothing in this run\n\n- `never matches`\n",
	} {
		if !strings.Contains(string(got), part) {
			t.Errorf("Markdown lacks %q", part)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report string
		want   string
	}{
		{"not JSON", `{`, "report.json: unexpected end of JSON input"},
		{"two suites", `[{}, {}]`, "2 suites, want 1"},
		{"a label filter", `[{"SuiteConfig": {"LabelFilter": "Slow"}}]`, `label filter ("Slow"): not supported`},
		{"a bad focus", `[{"SuiteConfig": {"FocusStrings": ["("]}}]`, "focus: error parsing regexp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, RunFile), []byte(`{}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, ReportFile), []byte(tc.report), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestNotesFile checks the notes conformance.md is made with: strict YAML, every regexp valid.
func TestNotesFile(t *testing.T) {
	n, err := LoadNotes("../notes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Failures) == 0 || len(n.Skips) == 0 {
		t.Errorf("%d failure notes, %d skip notes: the file lost its lists?", len(n.Failures), len(n.Skips))
	}
}
