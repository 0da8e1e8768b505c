// Package cli holds the command-line behaviour every diskforge binary shares, as users of Kubernetes components
// expect it: --version (with -o json) and component-base's logging flags (--logging-format=json, -v, --vmodule).
package cli

import (
	"flag"
	"fmt"
	"io"

	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // makes --logging-format=json available
	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/version"
)

// Flags are the shared flags of one command.
type Flags struct {
	program     string
	showVersion bool
	output      string
	logging     *logsapi.LoggingConfiguration
}

// AddFlags registers the shared flags on fs.
func AddFlags(fs *flag.FlagSet, program string) *Flags {
	f := &Flags{program: program, logging: logsapi.NewLoggingConfiguration()}
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	fs.StringVar(&f.output, "o", "", "with --version: output format, json or empty for text")
	logsapi.AddGoFlags(f.logging, fs)
	return f
}

// Apply runs after flag parsing. With --version it prints the version to w and reports done; otherwise it
// configures logging as the flags say.
func (f *Flags) Apply(w io.Writer) (done bool, err error) {
	if f.showVersion {
		return true, version.Print(w, f.program, f.output)
	}
	if f.output != "" {
		return false, fmt.Errorf("-o is only for --version")
	}
	if err := logsapi.ValidateAndApply(f.logging, nil); err != nil {
		return false, fmt.Errorf("logging flags: %w", err)
	}
	klog.InfoS("Starting", "program", f.program, "version", version.Get().String())
	return false, nil
}
