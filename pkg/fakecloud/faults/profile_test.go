package faults

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// callQuery makes one BeforeQuery and reports "ok" or the EC2 error code.
func callQuery(t *testing.T, inj *Injector, action string, params url.Values) string {
	t.Helper()
	if err := inj.BeforeQuery(context.Background(), action, params); err != nil {
		return ec2err.As(err).Code
	}
	return "ok"
}

var (
	// filtered, paged and unfiltered are request shapes of a Describe call.
	filtered   = url.Values{"Filter.1.Name": {"volume-id"}, "Filter.1.Value.1": {"vol-1"}}
	paged      = url.Values{"MaxResults": {"500"}}
	unfiltered = url.Values{}
)

// TestEC2ProfileBuckets pins every bucket of the ec2 profile: a fresh bucket admits exactly its capacity at
// once, then one call per 1/refill seconds, and never holds more than its capacity however long it rests.
func TestEC2ProfileBuckets(t *testing.T) {
	tests := []struct {
		action   string
		params   url.Values
		capacity int
		refill   float64
	}{
		{"CreateVolume", nil, 100, 5},
		{"DeleteVolume", nil, 100, 5},
		{"CreateSnapshot", nil, 100, 5},
		{"DeleteSnapshot", nil, 100, 5},
		{"CreateTags", nil, 100, 10},
		{"DeleteTags", nil, 100, 10},
		{"AttachVolume", nil, 50, 5},
		{"DetachVolume", nil, 50, 5},
		{"ModifyVolume", nil, 50, 5},
		{"CopyVolumes", nil, 50, 5},
		{"StartInstances", nil, 50, 5},
		{"StopInstances", nil, 50, 5},
		{"TerminateInstances", nil, 50, 5},
		{"ModifyInstanceAttribute", nil, 50, 5},
		{"DescribeVolumes", filtered, 100, 20},
		{"DescribeVolumes", paged, 100, 20},
		{"DescribeInstances", filtered, 100, 20},
		{"DescribeSnapshots", paged, 100, 20},
		{"DescribeVolumesModifications", unfiltered, 100, 20},
		{"DescribeAvailabilityZones", unfiltered, 100, 20},
		{"DescribeInstanceTypes", unfiltered, 100, 20},
		{"DescribeVolumes", unfiltered, 50, 10},
		{"DescribeInstances", unfiltered, 50, 10},
		{"DescribeSnapshots", unfiltered, 50, 10},
		{"DescribeVolumes", url.Values{"VolumeId.1": {"vol-1"}}, 50, 10},
	}
	const throttled = ec2err.CodeRequestLimitExceeded
	for _, tt := range tests {
		t.Run(tt.action+"?"+tt.params.Encode(), func(t *testing.T) {
			clock := testutil.NewClock()
			inj := mustNew(t, Config{RateLimitProfile: ProfileEC2}, WithClock(clock.Now))
			for i := range tt.capacity {
				if got := callQuery(t, inj, tt.action, tt.params); got != "ok" {
					t.Fatalf("call %d of a full bucket: %s", i+1, got)
				}
			}
			if got := callQuery(t, inj, tt.action, tt.params); got != throttled {
				t.Fatalf("call past the capacity: %s, want %s", got, throttled)
			}
			step := time.Duration(float64(time.Second) / tt.refill)
			clock.Advance(step - time.Millisecond)
			if got := callQuery(t, inj, tt.action, tt.params); got != throttled {
				t.Fatalf("just before one token is back: %s, want %s", got, throttled)
			}
			clock.Advance(time.Millisecond)
			if got := callQuery(t, inj, tt.action, tt.params); got != "ok" {
				t.Fatalf("one token after 1/refill s: %s", got)
			}
			if got := callQuery(t, inj, tt.action, tt.params); got != throttled {
				t.Fatalf("second call after one refill: %s, want %s", got, throttled)
			}
			// A second's refill admits refill calls.
			clock.Advance(time.Second)
			for i := range int(tt.refill) {
				if got := callQuery(t, inj, tt.action, tt.params); got != "ok" {
					t.Fatalf("call %d of a second's refill: %s", i+1, got)
				}
			}
			if got := callQuery(t, inj, tt.action, tt.params); got != throttled {
				t.Fatalf("call past a second's refill: %s, want %s", got, throttled)
			}
			clock.Advance(time.Hour)
			for i := range tt.capacity {
				if got := callQuery(t, inj, tt.action, tt.params); got != "ok" {
					t.Fatalf("call %d after an hour's rest: %s", i+1, got)
				}
			}
			if got := callQuery(t, inj, tt.action, tt.params); got != throttled {
				t.Fatalf("an hour's rest refilled past the capacity: %s", got)
			}
		})
	}
}

// TestEC2ProfileSeparateBuckets: actions under one entry (*, Describe*) each have a bucket of their own, and a
// Describe call's unfiltered bucket is apart from its filtered one.
func TestEC2ProfileSeparateBuckets(t *testing.T) {
	const throttled = ec2err.CodeRequestLimitExceeded
	clock := testutil.NewClock()
	inj := mustNew(t, Config{RateLimitProfile: ProfileEC2}, WithClock(clock.Now))
	drain := func(action string, params url.Values, n int) {
		t.Helper()
		for i := range n {
			if got := callQuery(t, inj, action, params); got != "ok" {
				t.Fatalf("%s call %d: %s", action, i+1, got)
			}
		}
		if got := callQuery(t, inj, action, params); got != throttled {
			t.Fatalf("%s past %d: %s", action, n, got)
		}
	}
	drain("AttachVolume", nil, 50)
	drain("DetachVolume", nil, 50)
	drain("DescribeVolumes", unfiltered, 50)
	drain("DescribeVolumes", filtered, 100)
	drain("DescribeInstances", paged, 100)
	drain("DescribeInstances", unfiltered, 50)
	// Before cannot see the parameters: its calls count as filtered.
	if err := inj.Before(context.Background(), "DescribeSnapshots"); err != nil {
		t.Fatalf("Before DescribeSnapshots: %v", err)
	}
	drain("DescribeSnapshots", unfiltered, 50)
	drain("DescribeSnapshots", filtered, 99)
}

// TestProfileComposes: --fault-rate-limit entries replace the profile's under the same key, the shared bucket
// applies on top, and error faults still follow the buckets.
func TestProfileComposes(t *testing.T) {
	const throttled = ec2err.CodeRequestLimitExceeded
	type step struct {
		action string
		params url.Values
		want   string
	}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "own entry replaces the profile's",
			cfg: Config{RateLimitProfile: ProfileEC2,
				ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 0, Burst: 1}}},
			steps: []step{{"CreateVolume", nil, "ok"}, {"CreateVolume", nil, throttled}, {"DeleteVolume", nil, "ok"}},
		},
		{
			name: "burst 0 turns one bucket off",
			cfg: Config{RateLimitProfile: ProfileEC2,
				ActionRateLimits: map[string]Limit{"*": {}, "Describe*": {RequestsPerSecond: 0, Burst: 1}}},
			steps: []step{
				{"AttachVolume", nil, "ok"}, {"AttachVolume", nil, "ok"},
				{"DescribeVolumesModifications", nil, "ok"}, {"DescribeVolumesModifications", nil, throttled},
			},
		},
		{
			name: "unfiltered bucket turned off falls back to the action's own",
			cfg: Config{RateLimitProfile: ProfileEC2, ActionRateLimits: map[string]Limit{
				"DescribeVolumes:unfiltered": {}, "DescribeVolumes": {RequestsPerSecond: 0, Burst: 1}}},
			steps: []step{{"DescribeVolumes", unfiltered, "ok"}, {"DescribeVolumes", filtered, throttled}},
		},
		{
			name:  "shared bucket on top",
			cfg:   Config{RateLimitProfile: ProfileEC2, RateLimit: Limit{RequestsPerSecond: 0, Burst: 2}},
			steps: []step{{"CreateVolume", nil, "ok"}, {"DescribeVolumes", nil, "ok"}, {"AttachVolume", nil, throttled}},
		},
		{
			name: "error faults after the buckets",
			cfg: Config{RateLimitProfile: ProfileEC2,
				ActionRateLimits: map[string]Limit{"AttachVolume": {RequestsPerSecond: 0, Burst: 1}},
				Errors:           map[string]ErrorFault{"*": {Rate: 1, Code: ec2err.CodeInternalError, Before: true}}},
			steps: []step{{"AttachVolume", nil, ec2err.CodeInternalError}, {"AttachVolume", nil, throttled}},
		},
		{
			name:  "no profile, no buckets",
			cfg:   Config{},
			steps: []step{{"DescribeVolumes", unfiltered, "ok"}, {"DescribeVolumes", unfiltered, "ok"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj := mustNew(t, tt.cfg, WithClock(testutil.NewClock().Now))
			for i, s := range tt.steps {
				if got := callQuery(t, inj, s.action, s.params); got != s.want {
					t.Fatalf("step %d (%s): got %s, want %s", i, s.action, got, s.want)
				}
			}
		})
	}
}

func TestUnfiltered(t *testing.T) {
	tests := []struct {
		query string
		want  bool
	}{
		{"", true},
		{"Action=DescribeVolumes&Version=2016-11-15", true},
		{"VolumeId.1=vol-1&VolumeId.2=vol-2", true},
		{"InstanceId.1=i-1", true},
		{"Owner.1=self&SnapshotId.1=snap-1", true},
		{"NextToken=", true},
		{"Filter.1.Name=volume-id&Filter.1.Value.1=vol-1", false},
		{"Filter.1.Name=tag:CSIVolumeName", false},
		{"MaxResults=500", false},
		{"NextToken=abc", false},
		{"VolumeId.1=vol-1&MaxResults=5", false},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := Unfiltered(q); got != tt.want {
			t.Errorf("Unfiltered(%q) = %v, want %v", tt.query, got, tt.want)
		}
	}
}

func TestLookupPrefix(t *testing.T) {
	m := map[string]int{"*": 1, "Describe*": 2, "DescribeVolumes*": 3, "DescribeVolumes": 4}
	tests := []struct {
		action, key string
		v           int
	}{
		{"DescribeVolumes", "DescribeVolumes", 4},
		{"DescribeVolumesModifications", "DescribeVolumes*", 3},
		{"DescribeInstances", "Describe*", 2},
		{"CreateVolume", "*", 1},
	}
	for _, tt := range tests {
		if key, v, ok := lookup(m, tt.action); !ok || key != tt.key || v != tt.v {
			t.Errorf("lookup(%s) = %q %d %v, want %q %d", tt.action, key, v, ok, tt.key, tt.v)
		}
	}
	if _, _, ok := lookup(map[string]int{"Describe*": 1}, "CreateVolume"); ok {
		t.Error("Describe* matched CreateVolume")
	}
}

func TestProfileLimits(t *testing.T) {
	for _, name := range []string{"", "none"} {
		if l, err := ProfileLimits(name); err != nil || l != nil {
			t.Errorf("ProfileLimits(%q) = %v, %v; want none", name, l, err)
		}
	}
	if _, err := ProfileLimits("gce"); err == nil {
		t.Error("unknown profile accepted")
	}
	a, err := ProfileLimits(ProfileEC2)
	if err != nil {
		t.Fatal(err)
	}
	a["CreateVolume"] = Limit{}
	if b, _ := ProfileLimits(ProfileEC2); b["CreateVolume"].Burst != 100 {
		t.Error("a caller changed the profile others read")
	}
}
