// Package suitereport reads what one run of Kubernetes' external storage suite (e2e.test) left behind and says
// what happened to each spec the run selected: passed, failed (and why), skipped (and why), or never reached
// (the suite's timeout came first).
//
// A run's directory holds ginkgo's JSON report (report.json, from -ginkgo.json-report) and run.json, which
// TestExternalStorage writes before the suite starts: e2e.test's command line and the versions of what ran. The
// report lists every spec e2e.test has, the ones its focus and skip left out included, and ginkgo marks those
// exactly as the ones a timeout kept from running (skipped, no message); Load tells them apart by applying the
// run's focus and skip again, as ginkgo does (to the suite's description and the spec's full text).
//
// TestExternalStorage checks the CI subset by name with Summary.CheckExactly and writes the Markdown
// (test/e2e/external/conformance.md for make e2e-conformance); `go run ./external/conformance-md` writes it again
// from a saved run directory.
package suitereport

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Files of a run directory.
const (
	ReportFile = "report.json" // ginkgo's JSON report
	RunFile    = "run.json"    // Run
)

// Run is what the harness knows of a run that ginkgo's report does not say.
type Run struct {
	// Command is e2e.test's command line, paths relative to the repository.
	Command []string `json:"command"`
	// Versions are name and version pairs, in the order to show them.
	Versions []Version `json:"versions"`
}

// Version is one component's version.
type Version struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Outcome is what happened to a selected spec.
type Outcome int

// The outcomes, in the order of the Markdown's columns.
const (
	Passed Outcome = iota
	Failed
	Skipped    // by the spec itself (a capability the driver lacks, ...), with a reason
	NotReached // selected, but the run ended first (timeout, interrupt)
	numOutcomes
)

func (o Outcome) String() string {
	return [...]string{"passed", "failed", "skipped", "not reached"}[o]
}

// SuiteNodes is the pattern under which failed suite-level nodes (BeforeSuite, ReportAfterSuite, ...) are counted.
const SuiteNodes = "(suite setup and teardown)"

// Spec is a spec the run selected, or a suite-level node that failed.
type Spec struct {
	Name    string // ginkgo's full text: External Storage [Driver: ...] [Testpattern: ...] suite test
	Pattern string // the test pattern, or SuiteNodes
	Suite   string // the storage suite (volumes, provisioning, ...)
	Outcome Outcome
	// Reason is a skip's reason or a failure's message, with the failure's state and location.
	Reason  string
	RunTime time.Duration
}

// Summary is one run: its specs and what the harness and ginkgo said about it.
type Summary struct {
	Run
	Description string    // the ginkgo suite's description
	Start, End  time.Time // of the suite
	Focus, Skip []string  // ginkgo's focus and skip regexps
	Timeout     time.Duration
	// Succeeded is ginkgo's verdict; SuiteFailures are its reasons beyond failed specs ("Suite Timeout Elapsed").
	Succeeded     bool
	SuiteFailures []string
	// Total is the number of specs e2e.test has (focus or not).
	Total int
	Specs []Spec
}

// ginkgo's JSON report: the fields read here.
type ginkgoReport struct {
	SuiteDescription           string
	SuiteSucceeded             bool
	SpecialSuiteFailureReasons []string
	StartTime, EndTime         time.Time
	SuiteConfig                struct {
		FocusStrings, SkipStrings []string
		LabelFilter               string
		Timeout                   time.Duration
	}
	SpecReports []ginkgoSpec
}

type ginkgoSpec struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string
	RunTime                 time.Duration
	Failure                 struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
		FailureNodeType string
	}
}

func (s ginkgoSpec) fullText() string {
	texts := slices.DeleteFunc(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText),
		func(t string) bool { return t == "" })
	return strings.Join(texts, " ")
}

// Load reads a run directory.
func Load(dir string) (*Summary, error) {
	var run Run
	if err := readJSON(filepath.Join(dir, RunFile), &run); err != nil {
		return nil, err
	}
	var reports []ginkgoReport
	if err := readJSON(filepath.Join(dir, ReportFile), &reports); err != nil {
		return nil, err
	}
	if len(reports) != 1 {
		return nil, fmt.Errorf("%s: %d suites, want 1", filepath.Join(dir, ReportFile), len(reports))
	}
	return summarize(reports[0], run)
}

func readJSON(file string, v any) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// patternRE finds a spec's test pattern and suite; tags such as [Slow] may stand between them.
var patternRE = regexp.MustCompile(`\[Testpattern: ([^\]]*)\] (?:\[[^\]]*\] )*([^ \[]+)`)

func summarize(r ginkgoReport, run Run) (*Summary, error) {
	if r.SuiteConfig.LabelFilter != "" {
		// Which specs a label filter left out cannot be told from the report's texts.
		return nil, fmt.Errorf("the run used a label filter (%q): not supported", r.SuiteConfig.LabelFilter)
	}
	selected, err := selector(r.SuiteDescription, r.SuiteConfig.FocusStrings, r.SuiteConfig.SkipStrings)
	if err != nil {
		return nil, err
	}
	s := &Summary{Run: run, Description: r.SuiteDescription, Start: r.StartTime, End: r.EndTime,
		Focus: r.SuiteConfig.FocusStrings, Skip: r.SuiteConfig.SkipStrings, Timeout: r.SuiteConfig.Timeout,
		Succeeded: r.SuiteSucceeded, SuiteFailures: r.SpecialSuiteFailureReasons}
	for _, g := range r.SpecReports {
		spec := Spec{Name: g.fullText(), RunTime: g.RunTime}
		if g.LeafNodeType == "It" {
			s.Total++
		}
		switch g.State {
		case "passed":
			spec.Outcome = Passed
		case "pending":
			spec.Outcome, spec.Reason = Skipped, "pending"
		case "skipped":
			switch {
			case g.Failure.Message != "":
				spec.Outcome, spec.Reason = Skipped, oneLine(g.Failure.Message)
			case g.LeafNodeType == "It" && selected(spec.Name):
				spec.Outcome = NotReached
			default:
				continue // left out by the focus or skip
			}
		default: // failed, timedout, panicked, interrupted, aborted
			spec.Outcome = Failed
			spec.Reason = g.State
			if g.Failure.FailureNodeType != "" && g.Failure.FailureNodeType != "It" {
				spec.Reason += " in " + g.Failure.FailureNodeType
			}
			if g.Failure.Location.FileName != "" {
				spec.Reason += fmt.Sprintf(" at %s:%d", trimPath(g.Failure.Location.FileName), g.Failure.Location.LineNumber)
			}
			if g.Failure.Message != "" {
				spec.Reason += ": " + oneLine(g.Failure.Message)
			}
		}
		if g.LeafNodeType != "It" {
			if spec.Outcome != Failed {
				continue // a suite-level node counts for its failures only
			}
			spec.Name = strings.TrimSpace(g.LeafNodeType + " " + spec.Name)
			spec.Pattern = SuiteNodes
		} else if m := patternRE.FindStringSubmatch(spec.Name); m != nil {
			spec.Pattern, spec.Suite = m[1], m[2]
		} else {
			spec.Pattern = "(no test pattern)"
		}
		s.Specs = append(s.Specs, spec)
	}
	return s, nil
}

// selector reports whether ginkgo's focus and skip select a spec's full text.
func selector(description string, focus, skip []string) (func(string) bool, error) {
	compile := func(res []string) (*regexp.Regexp, error) {
		if len(res) == 0 {
			return nil, nil
		}
		return regexp.Compile(strings.Join(res, "|"))
	}
	f, err := compile(focus)
	if err != nil {
		return nil, fmt.Errorf("focus: %w", err)
	}
	k, err := compile(skip)
	if err != nil {
		return nil, fmt.Errorf("skip: %w", err)
	}
	return func(text string) bool {
		text = description + " " + text
		return (f == nil || f.MatchString(text)) && (k == nil || !k.MatchString(text))
	}, nil
}

// oneLine is a message's first non-empty line, at most 400 bytes: enough for a table cell.
func oneLine(msg string) string {
	for line := range strings.SplitSeq(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 400 {
				line = line[:400] + "…"
			}
			return line
		}
	}
	return ""
}

// trimPath shortens a source path to what follows the module cache or the module root.
func trimPath(file string) string {
	if _, rest, ok := strings.Cut(file, "/k8s.io/kubernetes@"); ok {
		if _, rest, ok = strings.Cut(rest, "/"); ok {
			return rest
		}
	}
	return file
}

// Counts are the number of specs per outcome.
type Counts [numOutcomes]int

// Counts are the outcomes of the run's specs, suite-level failures not included.
func (s *Summary) Counts() Counts {
	var c Counts
	for _, spec := range s.Specs {
		if spec.Pattern != SuiteNodes {
			c[spec.Outcome]++
		}
	}
	return c
}

// SuiteNodeFailures is the number of suite-level nodes that failed.
func (s *Summary) SuiteNodeFailures() int {
	n := 0
	for _, spec := range s.Specs {
		if spec.Pattern == SuiteNodes {
			n++
		}
	}
	return n
}

// Selected is the number of specs the run selected.
func (c Counts) Selected() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// CheckExactly reports, as one error naming each, every way the run differs from "exactly these specs ran and
// passed": a spec of names that did not run (the focus no longer selects it: renamed, removed), was skipped,
// failed or was not reached, a spec that ran but is not in names, a suite-level failure.
func (s *Summary) CheckExactly(names []string) error {
	byName := map[string]Spec{}
	for _, spec := range s.Specs {
		byName[spec.Name] = spec
	}
	var errs []error
	for _, name := range names {
		spec, ok := byName[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("did not run (the focus does not select it: renamed or removed upstream?): %s", name))
		case spec.Outcome == NotReached:
			errs = append(errs, fmt.Errorf("not reached (the suite ended first): %s", name))
		case spec.Outcome != Passed:
			errs = append(errs, fmt.Errorf("%s (%s): %s", spec.Outcome, spec.Reason, name))
		}
		delete(byName, name)
	}
	for _, spec := range s.Specs {
		if _, extra := byName[spec.Name]; extra {
			if spec.Pattern == SuiteNodes {
				errs = append(errs, fmt.Errorf("suite node failed (%s): %s", spec.Reason, spec.Name))
			} else {
				errs = append(errs, fmt.Errorf("ran, but is not one of the %d listed specs (%s): %s", len(names), spec.Outcome, spec.Name))
			}
		}
	}
	return errors.Join(errs...)
}
