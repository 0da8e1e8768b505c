package faults

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// call makes one Before and reports "ok" or the EC2 error code.
func call(t *testing.T, inj *Injector, action string) string {
	t.Helper()
	err := inj.Before(context.Background(), action)
	if err == nil {
		return "ok"
	}
	e := ec2err.As(err)
	if e.Code == ec2err.CodeRequestLimitExceeded && (e.Status != http.StatusServiceUnavailable || e.Message != "Request limit exceeded.") {
		t.Errorf("throttle answered %d %q", e.Status, e.Message)
	}
	return e.Code
}

func TestRateLimit(t *testing.T) {
	const throttled = ec2err.CodeRequestLimitExceeded
	type step struct {
		advance time.Duration
		action  string
		want    string
	}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "shared burst then throttle then refill",
			cfg:  Config{RateLimit: Limit{RequestsPerSecond: 2, Burst: 3}},
			steps: []step{
				{0, "CreateVolume", "ok"}, {0, "DescribeVolumes", "ok"}, {0, "AttachVolume", "ok"},
				{0, "CreateVolume", throttled}, {0, "DescribeVolumes", throttled},
				{500 * time.Millisecond, "CreateVolume", "ok"}, {0, "CreateVolume", throttled},
				{time.Hour, "A", "ok"}, {0, "A", "ok"}, {0, "A", "ok"}, {0, "A", throttled}, // refills only to Burst
			},
		},
		{
			name: "zero rps allows burst then nothing",
			cfg:  Config{RateLimit: Limit{RequestsPerSecond: 0, Burst: 2}},
			steps: []step{
				{0, "A", "ok"}, {0, "A", "ok"}, {0, "A", throttled}, {time.Hour, "A", throttled},
			},
		},
		{
			name:  "burst zero is off",
			cfg:   Config{RateLimit: Limit{RequestsPerSecond: 1, Burst: 0}},
			steps: []step{{0, "A", "ok"}, {0, "A", "ok"}, {0, "A", "ok"}},
		},
		{
			name: "per action bucket leaves other actions alone",
			cfg:  Config{ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 1, Burst: 1}}},
			steps: []step{
				{0, "CreateVolume", "ok"}, {0, "CreateVolume", throttled},
				{0, "DescribeVolumes", "ok"}, {0, "DescribeVolumes", "ok"},
				{time.Second, "CreateVolume", "ok"},
			},
		},
		{
			name: "* gives each action its own bucket",
			cfg:  Config{ActionRateLimits: map[string]Limit{"*": {RequestsPerSecond: 1, Burst: 1}}},
			steps: []step{
				{0, "CreateVolume", "ok"}, {0, "CreateVolume", throttled},
				{0, "DeleteVolume", "ok"}, {0, "DeleteVolume", throttled},
			},
		},
		{
			name: "refused by action bucket does not drain shared bucket",
			cfg: Config{
				RateLimit:        Limit{RequestsPerSecond: 0, Burst: 2},
				ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 0, Burst: 1}},
			},
			steps: []step{
				{0, "CreateVolume", "ok"},
				{0, "CreateVolume", throttled}, {0, "CreateVolume", throttled},
				{0, "DescribeVolumes", "ok"}, {0, "DescribeVolumes", throttled},
			},
		},
		{
			name: "throttle comes before error faults",
			cfg: Config{
				RateLimit: Limit{RequestsPerSecond: 0, Burst: 1},
				Errors:    map[string]ErrorFault{"*": {Rate: 1, Code: ec2err.CodeInternalError, Before: true}},
			},
			steps: []step{{0, "A", ec2err.CodeInternalError}, {0, "A", throttled}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testutil.NewClock()
			inj := mustNew(t, tt.cfg, WithClock(clock.Now))
			for i, s := range tt.steps {
				clock.Advance(s.advance)
				if got := call(t, inj, s.action); got != s.want {
					t.Fatalf("step %d (%s): got %s, want %s", i, s.action, got, s.want)
				}
			}
		})
	}
}

func TestSetConfigRefillsBuckets(t *testing.T) {
	clock := testutil.NewClock()
	cfg := Config{RateLimit: Limit{RequestsPerSecond: 0, Burst: 1}}
	inj := mustNew(t, cfg, WithClock(clock.Now))
	if got := call(t, inj, "A"); got != "ok" {
		t.Fatalf("first call %s", got)
	}
	if got := call(t, inj, "A"); got != ec2err.CodeRequestLimitExceeded {
		t.Fatalf("second call %s", got)
	}
	if err := inj.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if got := call(t, inj, "A"); got != "ok" {
		t.Fatalf("call after SetConfig %s", got)
	}
}
