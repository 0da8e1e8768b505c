package version

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	tests := []struct {
		name       string
		settings   []debug.BuildSetting
		start      Info
		wantCommit string
		wantDate   string
	}{
		{"vcs stamp", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}},
			Info{}, "abc", "2026-01-02T03:04:05Z"},
		{"dirty tree", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}},
			Info{}, "abc-dirty", ""},
		{"linker flags win", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.time", Value: "then"}},
			Info{Commit: "def", BuildDate: "now"}, "def", "now"},
		{"no stamp", nil, Info{}, "", ""},
	}
	for _, tc := range tests {
		i := tc.start
		fromBuildInfo(&i, tc.settings)
		if i.Commit != tc.wantCommit || i.BuildDate != tc.wantDate {
			t.Errorf("%s: commit %q date %q, want %q %q", tc.name, i.Commit, i.BuildDate, tc.wantCommit, tc.wantDate)
		}
	}
}

func TestPrint(t *testing.T) {
	var text, js bytes.Buffer
	if err := Print(&text, "driver", ""); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), "driver "+version+" (commit ") {
		t.Errorf("text form %q", text.String())
	}
	if err := Print(&js, "driver", "json"); err != nil {
		t.Fatal(err)
	}
	var got Info
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("json form %q: %v", js.String(), err)
	}
	if got.Version != version || got.GoVersion == "" || got.Platform == "" || got.Commit == "" || got.BuildDate == "" {
		t.Errorf("json form %+v", got)
	}
	if err := Print(&js, "driver", "yaml"); err == nil {
		t.Error("Print accepted an unknown format")
	}
}
