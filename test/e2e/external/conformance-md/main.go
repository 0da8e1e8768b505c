// Command conformance-md writes the Markdown summary of a saved run of Kubernetes' external storage suite again,
// without running it: the run directory is the one TestExternalStorage saved (report.json and run.json, under
// _output/e2e-external). make e2e-conformance-md runs it on the newest make e2e-conformance run:
//
//	cd test/e2e && go run ./external/conformance-md -run-dir ../../_output/e2e-external/conformance-20261201T040000Z \
//		-notes external/notes.yaml -o external/conformance.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/diskforge/diskforge/test/e2e/external/suitereport"
)

func main() {
	runDir := flag.String("run-dir", "", "the saved run's directory (report.json, run.json)")
	out := flag.String("o", "", "the Markdown file to write")
	notes := flag.String("notes", "", "the notes file (YAML) to show beside failures and skips")
	regenerate := flag.String("regenerate", "", "the command that regenerates the file, for its header")
	flag.Parse()
	if *runDir == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: conformance-md -run-dir DIR -o FILE [-notes FILE] [-regenerate COMMAND]")
		os.Exit(2)
	}
	s, err := write(*runDir, *out, *notes, *regenerate)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance-md:", err)
		os.Exit(1)
	}
	c := s.Counts()
	fmt.Printf("%s: %d passed, %d failed, %d skipped, %d not reached\n", *out, c[suitereport.Passed],
		c[suitereport.Failed], c[suitereport.Skipped], c[suitereport.NotReached])
}

func write(runDir, out, notesFile, regenerate string) (*suitereport.Summary, error) {
	s, err := suitereport.Load(runDir)
	if err != nil {
		return nil, err
	}
	o := suitereport.MarkdownOptions{Regenerate: regenerate}
	if notesFile != "" {
		if o.Notes, err = suitereport.LoadNotes(notesFile); err != nil {
			return nil, err
		}
	}
	return s, s.WriteMarkdownFile(out, o)
}
