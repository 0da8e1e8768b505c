// Package version tells which build of diskforge is running.
package version

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Set at link time: -ldflags "-X github.com/diskforge/diskforge/internal/version.version=v1.2.3 ...". Commit and
// build date default to what the Go toolchain recorded from git (vcs.revision, vcs.time).
var (
	version   = "v0.1.0-dev"
	commit    = ""
	buildDate = ""
)

// Info is what `--version` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
	Compiler  string `json:"compiler"`
	Platform  string `json:"platform"`
}

// Get returns this binary's version information.
func Get() Info {
	i := Info{Version: version, Commit: commit, BuildDate: buildDate, GoVersion: runtime.Version(),
		Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fromBuildInfo(&i, bi.Settings)
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.BuildDate == "" {
		i.BuildDate = "unknown"
	}
	return i
}

// fromBuildInfo fills what the linker flags left empty from the toolchain's VCS stamp.
func fromBuildInfo(i *Info, settings []debug.BuildSetting) {
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			if i.Commit == "" {
				i.Commit = s.Value
			}
		case "vcs.time":
			if i.BuildDate == "" {
				i.BuildDate = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && i.Commit != "" && commit == "" {
		i.Commit += "-dirty"
	}
}

// String is the one-line form.
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s %s)", i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Compiler,
		i.Platform)
}

// Print writes the information as a line of text (format "") or as JSON (format "json").
func Print(w io.Writer, program, format string) error {
	i := Get()
	switch format {
	case "":
		_, err := fmt.Fprintf(w, "%s %s\n", program, i)
		return err
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(i)
	default:
		return fmt.Errorf("unknown output format %q (want json, or none for text)", format)
	}
}
