package suitereport

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Notes say why a failure or a skip happens here, when it is not the driver: each is shown beside the failures
// (matched against the spec's full name) or skip reasons (matched against the reason) its regexp matches. A note
// that matches nothing in the run is listed as such, so stale notes show.
type Notes struct {
	Failures []Note `json:"failures"`
	Skips    []Note `json:"skips"`
}

// Note is one explanation.
type Note struct {
	Match string `json:"match"` // a regexp
	Note  string `json:"note"`
	re    *regexp.Regexp
}

// LoadNotes reads a notes file (YAML).
func LoadNotes(file string) (*Notes, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var n Notes
	if err := yaml.UnmarshalStrict(raw, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, list := range [][]Note{n.Failures, n.Skips} {
		for i := range list {
			if list[i].re, err = regexp.Compile(list[i].Match); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	return &n, nil
}

// noteFor is the first note of list that matches text, and marks it used.
func noteFor(list []Note, used map[*Note]bool, text string) string {
	for i := range list {
		if list[i].re != nil && list[i].re.MatchString(text) {
			used[&list[i]] = true
			return list[i].Note
		}
	}
	return ""
}

// MarkdownOptions say what the Markdown names besides the run.
type MarkdownOptions struct {
	// Regenerate is the command that writes the file again from the saved run, shown in its header.
	Regenerate string
	Notes      *Notes // may be nil
}

// WriteMarkdown writes the run's summary: header (command, versions, date, duration, counts), per test pattern
// and suite the counts with the skip reasons, the failures with their reasons, the skips by reason.
func (s *Summary) WriteMarkdown(w io.Writer, o MarkdownOptions) error {
	notes := o.Notes
	if notes == nil {
		notes = &Notes{}
	}
	used := map[*Note]bool{}
	c := s.Counts()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", Title)
	fmt.Fprintf(&b, "Generated from one run's ginkgo report by TestExternalStorage; do not edit (notes: `test/e2e/external/notes.yaml`).\n")
	if o.Regenerate != "" {
		fmt.Fprintf(&b, "Again from the saved run: `%s`.\n", o.Regenerate)
	}
	b.WriteString("\n| | |\n|---|---|\n")
	row(&b, "date", s.Start.UTC().Format("2006-01-02 15:04 MST"))
	row(&b, "duration", s.End.Sub(s.Start).Round(time.Second).String())
	for _, v := range s.Versions {
		row(&b, v.Name, v.Version)
	}
	specs := fmt.Sprintf("%d in e2e.test, %d selected by the focus and skip: **%d passed, %d failed, %d skipped, %d not reached**",
		s.Total, c.Selected(), c[Passed], c[Failed], c[Skipped], c[NotReached])
	if n := s.SuiteNodeFailures(); n > 0 {
		specs += fmt.Sprintf("; %d suite-level node failed", n)
	}
	row(&b, "specs", specs)
	result := "succeeded"
	if !s.Succeeded {
		result = "failed"
	}
	if len(s.SuiteFailures) > 0 {
		result += " (" + strings.Join(s.SuiteFailures, "; ") + ")"
	}
	row(&b, "suite", result)
	if len(s.Command) > 0 {
		b.WriteString("\n```sh\n" + shellCommand(s.Command) + "\n```\n")
	}

	// Per pattern and suite.
	type group struct {
		counts  Counts
		reasons map[string]int
	}
	groups := map[[2]string]*group{}
	for _, spec := range s.Specs {
		if spec.Pattern == SuiteNodes {
			continue // under Failures
		}
		k := [2]string{spec.Pattern, spec.Suite}
		if groups[k] == nil {
			groups[k] = &group{reasons: map[string]int{}}
		}
		groups[k].counts[spec.Outcome]++
		if spec.Outcome == Skipped {
			groups[k].reasons[spec.Reason]++
		}
	}
	b.WriteString("\n## Per test pattern and suite\n\n")
	b.WriteString("| pattern | suite | passed | failed | skipped | not reached | skipped because |\n|---|---|---|---|---|---|---|\n")
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	for _, k := range keys {
		g := groups[k]
		var why []string
		for _, r := range slices.Sorted(maps.Keys(g.reasons)) {
			why = append(why, fmt.Sprintf("%s (%d)", r, g.reasons[r]))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", cell(k[0]), cell(k[1]), num(g.counts[Passed]),
			num(g.counts[Failed]), num(g.counts[Skipped]), num(g.counts[NotReached]), cell(strings.Join(why, "; ")))
	}
	fmt.Fprintf(&b, "| **total** | | %d | %d | %d | %d | |\n", c[Passed], c[Failed], c[Skipped], c[NotReached])

	// Failures, with their reasons and notes.
	var failed []Spec
	for _, spec := range s.Specs {
		if spec.Outcome == Failed {
			failed = append(failed, spec)
		}
	}
	slices.SortFunc(failed, func(a, b Spec) int { return cmp.Compare(a.Name, b.Name) })
	fmt.Fprintf(&b, "\n## Failures (%d)\n\n", len(failed))
	if len(failed) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| spec | reason | note |\n|---|---|---|\n")
		for _, spec := range failed {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(spec.Name), cell(spec.Reason), cell(noteFor(notes.Failures, used, spec.Name)))
		}
	}

	// Skips by reason.
	reasons := map[string]int{}
	for _, spec := range s.Specs {
		if spec.Outcome == Skipped {
			reasons[spec.Reason]++
		}
	}
	fmt.Fprintf(&b, "\n## Skipped by the suite (%d), by reason\n\n", c[Skipped])
	if len(reasons) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| specs | reason | note |\n|---|---|---|\n")
		order := slices.SortedFunc(maps.Keys(reasons), func(x, y string) int {
			return cmp.Or(cmp.Compare(reasons[y], reasons[x]), cmp.Compare(x, y))
		})
		for _, r := range order {
			fmt.Fprintf(&b, "| %d | %s | %s |\n", reasons[r], cell(r), cell(noteFor(notes.Skips, used, r)))
		}
	}

	// Specs the run did not reach.
	if c[NotReached] > 0 {
		fmt.Fprintf(&b, "\n## Not reached (%d)\n\nSelected, but the suite ended before them:\n\n", c[NotReached])
		for _, spec := range s.Specs {
			if spec.Outcome == NotReached {
				fmt.Fprintf(&b, "- %s\n", cell(spec.Name))
			}
		}
	}

	// Notes nothing in the run matched.
	var stale []string
	for _, list := range [][]Note{notes.Failures, notes.Skips} {
		for i := range list {
			if !used[&list[i]] {
				stale = append(stale, code(list[i].Match))
			}
		}
	}
	if len(stale) > 0 {
		b.WriteString("\n## Notes that matched nothing in this run\n\n")
		for _, m := range stale {
			fmt.Fprintf(&b, "- %s\n", m)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func row(b *strings.Builder, name, value string) {
	fmt.Fprintf(b, "| %s | %s |\n", name, value)
}

// cell makes text safe for a table cell: no pipes or line breaks.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// shellCommand quotes args for a shell, one to a line.
func shellCommand(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return !strings.ContainsRune(safeShell, r) }) {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " \\\n    ")
}

const safeShell = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%"

func code(s string) string { return "`" + strings.ReplaceAll(s, "`", "'") + "`" }

// num leaves zeros out, so the table's numbers stand out.
func num(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// Title is the Markdown's title.
const Title = "Kubernetes' external storage suite against diskforge"

// WriteMarkdownFile writes the run's Markdown to the file out.
func (s *Summary) WriteMarkdownFile(out string, o MarkdownOptions) error {
	var b strings.Builder
	if err := s.WriteMarkdown(&b, o); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}
