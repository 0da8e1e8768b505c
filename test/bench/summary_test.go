package main

import (
	"strings"
	"testing"
)

// TestSummary: the line names the floor only when the profile has one, and always the figures #24's targets
// are about.
func TestSummary(t *testing.T) {
	base := result{Driver: "after", Profile: "1s", Start: "cold", Cycles: 100, WallSeconds: 4.2, Errors: 0, CallsPerCycle: 4.25,
		Throttled: 3, ThrottledShare: 0.007, Retries: map[string]int{"CreateVolume/DeadlineExceeded": 2, "ControllerPublishVolume/Unavailable": 1},
		Latency: map[string]latencyStats{"CreateVolume": {P50: 1.25}, "ControllerPublishVolume": {P50: 1.1}}}
	floored := base
	floored.FloorSeconds, floored.WallToFloor = 3, 1.4
	faulted := base
	faulted.FakecloudArgs = []string{"--fault-error=*=0.3:RequestLimitExceeded:before"}
	tests := []struct {
		name        string
		r           result
		want, never []string
	}{
		{name: "no floor", r: base, never: []string{"floor"},
			want: []string{"after 1s cold: 100 cycles in 4.2 s;", "4.25 calls/cycle", "3 throttled (0.7 %)", "3 retries",
				"p50 CreateVolume 1.250 s, ControllerPublishVolume 1.100 s", "0 volumes left, 0 duplicated"}},
		{name: "floor", r: floored, want: []string{"floor 3.0 s: 1.40× the floor"}},
		{name: "fakecloud flags", r: faulted, want: []string{"after 1s cold --fault-error=*=0.3:RequestLimitExceeded:before: 100 cycles"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summary(&tt.r)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary %q lacks %q", got, w)
				}
			}
			for _, n := range tt.never {
				if strings.Contains(got, n) {
					t.Errorf("summary %q has %q", got, n)
				}
			}
		})
	}
}

// TestParseVariants: ";" separates fakecloud set-ups, an empty one runs fakecloud as it is, and each takes
// the buckets of its own --fault-rate-limit.
func TestParseVariants(t *testing.T) {
	tests := []struct {
		spec, rateLimits string
		wantArgs         [][]string
		wantProfiles     []string
		wantErr          bool
	}{
		{spec: "", wantArgs: [][]string{nil}, wantProfiles: []string{""}},
		{spec: "; --fault-error=*=0.3:RequestLimitExceeded:before", wantArgs: [][]string{nil, {"--fault-error=*=0.3:RequestLimitExceeded:before"}},
			wantProfiles: []string{"", ""}},
		{spec: "--rate-limits=ec2;", wantArgs: [][]string{{"--rate-limits=ec2"}, nil}, wantProfiles: []string{"ec2", ""}},
		{spec: ";", rateLimits: "ec2", wantArgs: [][]string{nil, nil}, wantProfiles: []string{"ec2", "ec2"}},
		{spec: "--rate-limits=gce", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseVariants(tt.spec, tt.rateLimits)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseVariants(%q) error = %v, want error %v", tt.spec, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if len(got) != len(tt.wantArgs) {
			t.Fatalf("parseVariants(%q) = %d variants, want %d", tt.spec, len(got), len(tt.wantArgs))
		}
		for i, v := range got {
			if strings.Join(v.args, " ") != strings.Join(tt.wantArgs[i], " ") || string(v.limits.RateLimitProfile) != tt.wantProfiles[i] {
				t.Errorf("parseVariants(%q)[%d] = %q (profile %q), want %q (profile %q)", tt.spec, i, v.args,
					v.limits.RateLimitProfile, tt.wantArgs[i], tt.wantProfiles[i])
			}
		}
	}
}
