package main

import (
	"bufio"
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// TestSidecarFlagsMatchManifest holds the sidecar caller to the flags deploy/kustomize/base/controller.yaml
// gives the sidecars: their --timeout, and no --retry-interval-* (so their defaults, which the caller copies).
func TestSidecarFlagsMatchManifest(t *testing.T) {
	f, err := os.Open("../../deploy/kustomize/base/controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	args := map[string][]string{} // container name → its args
	var container string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "- name: "); ok && strings.HasPrefix(name, "csi-") {
			container = name
			continue
		}
		if arg, ok := strings.CutPrefix(line, "- --"); ok && container != "" {
			args[container] = append(args[container], "--"+arg)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		sidecar string
		timeout time.Duration
		rpcs    []string
	}{
		{provisioner, provisionerTimeout, []string{"CreateVolume", "DeleteVolume"}},
		{attacher, attacherTimeout, []string{"ControllerPublishVolume", "ControllerUnpublishVolume"}},
	} {
		a := args[tt.sidecar]
		var timeout time.Duration
		for _, arg := range a {
			if v, ok := strings.CutPrefix(arg, "--timeout="); ok {
				if timeout, err = time.ParseDuration(v); err != nil {
					t.Errorf("%s: %s: %v", tt.sidecar, arg, err)
				}
			}
			if strings.HasPrefix(arg, "--retry-interval-") {
				t.Errorf("%s sets %s; the caller assumes the defaults", tt.sidecar, arg)
			}
		}
		if timeout != tt.timeout {
			t.Errorf("%s: --timeout %s in the manifest (args %q), %s in the caller", tt.sidecar, timeout, a, tt.timeout)
		}
		for _, rpc := range tt.rpcs {
			if sidecarOf(rpc) != tt.sidecar || timeoutOf(rpc) != tt.timeout {
				t.Errorf("%s: sent by %s with %s, want %s with %s", rpc, sidecarOf(rpc), timeoutOf(rpc), tt.sidecar, tt.timeout)
			}
		}
	}
}

func TestSidecarCaller(t *testing.T) {
	tests := []struct {
		name        string
		sidecar     bool
		answers     []codes.Code // one per attempt; OK ends
		wantSlept   []time.Duration
		wantRetried []codes.Code
		wantCode    codes.Code
	}{
		{"plain sends once", false, []codes.Code{codes.DeadlineExceeded}, nil, nil, codes.DeadlineExceeded},
		{"success at once", true, []codes.Code{codes.OK}, nil, nil, codes.OK},
		{
			name:    "retryable codes back off, doubling to the cap",
			sidecar: true,
			answers: []codes.Code{codes.DeadlineExceeded, codes.Aborted, codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.OK},
			// start 1 s, max 5 s
			wantSlept:   []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second},
			wantRetried: []codes.Code{codes.DeadlineExceeded, codes.Aborted, codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded},
			wantCode:    codes.OK,
		},
		{
			name: "a final code ends it", sidecar: true,
			answers:   []codes.Code{codes.Unavailable, codes.InvalidArgument, codes.OK},
			wantSlept: []time.Duration{time.Second}, wantRetried: []codes.Code{codes.Unavailable}, wantCode: codes.InvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var slept []time.Duration
			c := caller{sidecar: tt.sidecar, start: time.Second, max: 5 * time.Second,
				sleep: func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }}
			attempt := 0
			o := c.call(context.Background(), "CreateVolume", func(ctx context.Context) error {
				if dl, ok := ctx.Deadline(); tt.sidecar && (!ok || time.Until(dl) > provisionerTimeout) {
					t.Errorf("attempt %d: deadline %v %v, want within %s", attempt, dl, ok, provisionerTimeout)
				}
				code := tt.answers[attempt]
				attempt++
				return status.Error(code, "answer")
			})
			if got := status.Code(o.err); got != tt.wantCode {
				t.Errorf("gave up on %s, want %s", got, tt.wantCode)
			}
			if !slices.Equal(slept, tt.wantSlept) {
				t.Errorf("slept %v, want %v", slept, tt.wantSlept)
			}
			if !slices.Equal(o.retried, tt.wantRetried) {
				t.Errorf("retried %v, want %v", o.retried, tt.wantRetried)
			}
		})
	}
}

func TestSidecarCallerStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := caller{sidecar: true, start: time.Second, max: time.Minute,
		sleep: func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }}
	attempts := 0
	o := c.call(ctx, "DeleteVolume", func(context.Context) error {
		attempts++
		return status.Error(codes.Unavailable, "down")
	})
	if o.err == nil || attempts != 1 {
		t.Errorf("after the caller's context ended: err %v, attempts %d", o.err, attempts)
	}
}

// TestFloor pins the floor: the slowest action's (N − capacity)/refill plus the transitions from that step on.
func TestFloor(t *testing.T) {
	ec2 := faults.Config{RateLimitProfile: faults.ProfileEC2}
	none := faults.Config{}
	instant, oneSecond := profile{Name: "instant"}, profile{Name: "1s", Transition: time.Second}
	tests := []struct {
		name   string
		limits faults.Config
		n      int
		p      profile
		want   time.Duration
	}{
		{"no limits, instant", none, 1000, instant, 0},
		{"no limits, 1 s transitions", none, 1000, oneSecond, 3 * time.Second},
		{"no limits, spread", none, 100, profile{Transition: time.Second, Spread: 10 * time.Second}, 9900*time.Millisecond + 3*time.Second},
		// AttachVolume and DetachVolume (50/5) are the slowest: (1000-50)/5 = 190 s.
		{"ec2, 1000, instant", ec2, 1000, instant, 190 * time.Second},
		// The last attach token at 190 s, then the attach and the detach transitions.
		{"ec2, 1000, 1 s", ec2, 1000, oneSecond, 192 * time.Second},
		{"ec2, 200, instant", ec2, 200, instant, 30 * time.Second},
		// Within every bucket: the transitions alone.
		{"ec2, 50, 1 s", ec2, 50, oneSecond, 3 * time.Second},
		{"ec2, 100, instant", ec2, 100, instant, 10 * time.Second},
		{"bucket that never refills", faults.Config{ActionRateLimits: map[string]faults.Limit{"DeleteVolume": {Burst: 10}}}, 11, instant, time.Duration(math.MaxInt64)},
		// An override of the profile: AttachVolume 10/2 → (50-10)/2 = 20 s, then 1 s attach and 1 s detach.
		{"ec2 with an override", faults.Config{RateLimitProfile: faults.ProfileEC2,
			ActionRateLimits: map[string]faults.Limit{"AttachVolume": {RequestsPerSecond: 2, Burst: 10}}}, 50, oneSecond, 22 * time.Second},
		// 4 calls a cycle through one bucket: (400-100)/50 = 6 s.
		{"shared bucket", faults.Config{RateLimit: faults.Limit{RequestsPerSecond: 50, Burst: 100}}, 100, instant, 6 * time.Second},
	}
	for _, tt := range tests {
		if got := floor(tt.limits, tt.n, tt.p); got != tt.want {
			t.Errorf("%s: floor %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestRateLimitsOf(t *testing.T) {
	cfg, err := rateLimitsOf("ec2", []string{"--fault-error=*=0.3:RequestLimitExceeded:before", "--fault-rate-limit", "100/200,AttachVolume=2/10"})
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.ActionLimits()
	if cfg.RateLimit != (faults.Limit{RequestsPerSecond: 100, Burst: 200}) || l["AttachVolume"] != (faults.Limit{RequestsPerSecond: 2, Burst: 10}) ||
		l["CreateVolume"] != (faults.Limit{RequestsPerSecond: 5, Burst: 100}) {
		t.Errorf("limits %+v", cfg)
	}
	if _, err := rateLimitsOf("gce", nil); err == nil {
		t.Error("unknown profile accepted")
	}
	if cfg, err := rateLimitsOf("", []string{"--rate-limits=ec2"}); err != nil || cfg.RateLimitProfile != faults.ProfileEC2 {
		t.Errorf("profile among the fakecloud flags: %+v, %v", cfg, err)
	}
}
