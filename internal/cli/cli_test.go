package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"testing"
)

func TestFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantDone bool
		wantErr  bool
		wantJSON bool
	}{
		{"version as text", []string{"--version"}, true, false, false},
		{"version as json", []string{"--version", "-o", "json"}, true, false, true},
		{"unknown version format", []string{"--version", "-o", "yaml"}, true, true, false},
		{"output without version", []string{"-o", "json"}, false, true, false},
		{"json logs", []string{"--logging-format=json", "-v=2"}, false, false, false},
		{"unknown log format", []string{"--logging-format=xml"}, false, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := AddFlags(fs, "driver")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			done, err := f.Apply(&out)
			if done != tc.wantDone || (err != nil) != tc.wantErr {
				t.Fatalf("Apply = %v, %v; want done %v, error %v", done, err, tc.wantDone, tc.wantErr)
			}
			if tc.wantJSON && !json.Valid(out.Bytes()) {
				t.Errorf("not JSON: %q", out.String())
			}
		})
	}
}
