package faults

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

func TestLatency(t *testing.T) {
	tests := []struct {
		name    string
		latency map[string]Duration
		action  string
		want    []time.Duration
	}{
		{"action entry", map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond), "*": Duration(5 * time.Millisecond)}, "CreateVolume", []time.Duration{200 * time.Millisecond}},
		{"falls back to *", map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond), "*": Duration(5 * time.Millisecond)}, "DescribeVolumes", []time.Duration{5 * time.Millisecond}},
		{"no entry", map[string]Duration{"CreateVolume": Duration(200 * time.Millisecond)}, "DescribeVolumes", nil},
		{"zero latency does not sleep", map[string]Duration{"*": 0}, "DescribeVolumes", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &sleepRecorder{}
			inj := mustNew(t, Config{Latency: tt.latency}, WithSleep(rec.Sleep))
			if err := inj.Before(context.Background(), tt.action); err != nil {
				t.Fatalf("Before: %v", err)
			}
			if !slices.Equal(rec.slept, tt.want) {
				t.Errorf("slept %v, want %v", rec.slept, tt.want)
			}
		})
	}
}

func TestLatencyCancelledContext(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
	}{
		{"injected sleep", []Option{WithSleep((&sleepRecorder{}).Sleep)}},
		// The real sleep with an hour of latency must still return at once on a cancelled ctx.
		{"default sleep", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj := mustNew(t, Config{Latency: map[string]Duration{"*": Duration(time.Hour)}}, tt.opts...)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := inj.Before(ctx, "CreateVolume")
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Before = %v, want context.Canceled", err)
			}
		})
	}
}

func TestErrorFaultAlwaysFails(t *testing.T) {
	tests := []struct {
		name       string
		fault      ErrorFault
		wantStatus int
		wantMsg    string
	}{
		{"throttle", ErrorFault{Rate: 1, Code: ec2err.CodeRequestLimitExceeded}, http.StatusServiceUnavailable, "Request limit exceeded."},
		{"internal", ErrorFault{Rate: 1, Code: ec2err.CodeInternalError}, http.StatusInternalServerError, "An internal error has occurred"},
		{"client code", ErrorFault{Rate: 1, Code: ec2err.CodeIncorrectState}, http.StatusBadRequest, "Injected fault IncorrectState for AttachVolume."},
		{"status and message override", ErrorFault{Rate: 1, Code: ec2err.CodeRequestLimitExceeded, Status: 400, Message: "slow down"}, http.StatusBadRequest, "slow down"},
	}
	for _, tt := range tests {
		for _, before := range []bool{false, true} {
			tt.fault.Before = before
			inj := mustNew(t, Config{Errors: map[string]ErrorFault{"AttachVolume": tt.fault}}, WithRand(seq(0.999999)))
			phase := func() error { return inj.After("AttachVolume") }
			if before {
				phase = func() error { return inj.Before(context.Background(), "AttachVolume") }
			}
			for range 5 {
				var e *ec2err.Error
				if err := phase(); !errors.As(err, &e) {
					t.Fatalf("%s before=%v: got %v, want *ec2err.Error", tt.name, before, err)
				}
				if e.Code != tt.fault.Code || e.Status != tt.wantStatus || e.Message != tt.wantMsg {
					t.Errorf("%s before=%v: got %q %d %q, want %q %d %q", tt.name, before, e.Code, e.Status, e.Message,
						tt.fault.Code, tt.wantStatus, tt.wantMsg)
				}
			}
		}
	}
}

func TestErrorFaultPhaseAndFallback(t *testing.T) {
	cfg := Config{Errors: map[string]ErrorFault{
		"*":            {Rate: 1, Code: ec2err.CodeInternalError, Before: true},
		"CreateVolume": {Rate: 1, Code: ec2err.CodeRequestLimitExceeded},
		"DeleteVolume": {Rate: 0, Code: ec2err.CodeInternalError},
	}}
	tests := []struct {
		action             string
		wantBefore, wantAf string // "" = no error
	}{
		{"DescribeVolumes", ec2err.CodeInternalError, ""},
		{"CreateVolume", "", ec2err.CodeRequestLimitExceeded},
		{"DeleteVolume", "", ""}, // its own entry (rate 0) replaces "*"
	}
	inj := mustNew(t, cfg, WithRand(seq(0)))
	code := func(err error) string {
		var e *ec2err.Error
		if errors.As(err, &e) {
			return e.Code
		}
		if err != nil {
			t.Fatalf("non-EC2 error %v", err)
		}
		return ""
	}
	for _, tt := range tests {
		if got := code(inj.Before(context.Background(), tt.action)); got != tt.wantBefore {
			t.Errorf("%s Before = %q, want %q", tt.action, got, tt.wantBefore)
		}
		if got := code(inj.After(tt.action)); got != tt.wantAf {
			t.Errorf("%s After = %q, want %q", tt.action, got, tt.wantAf)
		}
	}
}

func TestErrorFaultRate(t *testing.T) {
	// Draws below Rate fail, the rest pass.
	inj := mustNew(t, Config{Errors: map[string]ErrorFault{"*": {Rate: 0.3, Code: ec2err.CodeInternalError}}},
		WithRand(seq(0.1, 0.5, 0.29, 0.3, 0.99)))
	var got []bool
	for range 5 {
		got = append(got, inj.After("CreateVolume") != nil)
	}
	if want := []bool{true, false, true, false, false}; !slices.Equal(got, want) {
		t.Errorf("failures %v, want %v", got, want)
	}
}

func TestErrorFaultCount(t *testing.T) {
	inj := mustNew(t, Config{Errors: map[string]ErrorFault{
		"CreateVolume": {Rate: 1, Code: ec2err.CodeInternalError, Count: 2},
		"*":            {Rate: 1, Code: ec2err.CodeRequestLimitExceeded, Before: true},
	}})
	failures := 0
	for range 5 {
		if inj.After("CreateVolume") != nil {
			failures++
		}
		if failures == 1 {
			if c := inj.Config().Errors["CreateVolume"].Count; c != 1 {
				t.Errorf("remaining count = %d, want 1", c)
			}
		}
	}
	if failures != 2 {
		t.Errorf("failures = %d, want 2", failures)
	}
	// Once spent, the entry is gone, so the "*" entry applies to CreateVolume again.
	if _, ok := inj.Config().Errors["CreateVolume"]; ok {
		t.Error("spent fault still in config")
	}
	if err := inj.Before(context.Background(), "CreateVolume"); !ec2err.HasCode(err, ec2err.CodeRequestLimitExceeded) {
		t.Errorf("Before after count spent = %v, want the * fault", err)
	}
}

func TestStuck(t *testing.T) {
	inj := mustNew(t, Config{Stuck: []string{TransitionAttach, TransitionDetach}})
	for _, tt := range []struct {
		name string
		want bool
	}{
		{TransitionAttach, true}, {TransitionDetach, true}, {TransitionVolumeCreate, false}, {TransitionSnapshot, false},
	} {
		if got := inj.Stuck(tt.name); got != tt.want {
			t.Errorf("Stuck(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if err := inj.SetConfig(Config{}); err != nil {
		t.Fatal(err)
	}
	if inj.Stuck(TransitionAttach) {
		t.Error("attach still stuck after reset")
	}
}

// TestHoldNext pins the two forms of the attach fault: the plain one holds every attach transition while it is set
// and takes no count; attach:N gives exactly N holds, shows what is left, and then goes.
func TestHoldNext(t *testing.T) {
	tests := []struct {
		name      string
		stuck     []string
		holds     []bool // HoldNext(attach) on successive attachments
		stuckNow  bool   // Stuck(attach) throughout
		remaining []string
	}{
		{"plain", []string{"attach"}, []bool{false, false}, true, []string{"attach"}},
		{"count 1", []string{"attach:1"}, []bool{true, false, false}, false, nil},
		{"count 2", []string{"attach:2"}, []bool{true, true, false}, false, nil},
		{"count beside plain detach", []string{"detach", "attach:1"}, []bool{true, false}, false, []string{"detach"}},
		{"plain and count", []string{"attach", "attach:1"}, []bool{true, false}, true, []string{"attach"}},
		{"none", nil, []bool{false}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj := mustNew(t, Config{Stuck: tt.stuck})
			for i, want := range tt.holds {
				if got := inj.HoldNext(TransitionAttach); got != want {
					t.Errorf("HoldNext #%d = %v, want %v", i+1, got, want)
				}
				if got := inj.Stuck(TransitionAttach); got != tt.stuckNow {
					t.Errorf("Stuck(attach) after #%d = %v, want %v", i+1, got, tt.stuckNow)
				}
				if inj.HoldNext(TransitionDetach) {
					t.Error("HoldNext(detach) took a hold")
				}
			}
			if got := inj.Config().Stuck; !slices.Equal(got, tt.remaining) {
				t.Errorf("stuck left %q, want %q", got, tt.remaining)
			}
		})
	}
	inj := mustNew(t, Config{Stuck: []string{"attach:3"}})
	inj.HoldNext(TransitionAttach)
	if got := inj.Config().Stuck; !slices.Equal(got, []string{"attach:2"}) {
		t.Errorf("after one hold of attach:3 the config shows %q", got)
	}
	var nilInj *Injector
	if nilInj.HoldNext(TransitionAttach) {
		t.Error("nil injector took a hold")
	}
}

func TestSetConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"full", Config{
			Latency:          map[string]Duration{"*": Duration(time.Millisecond)},
			Errors:           map[string]ErrorFault{"AttachVolume": {Rate: 0.2, Code: "InternalError", Count: 3, Status: 500}},
			RateLimit:        Limit{RequestsPerSecond: 50, Burst: 100},
			ActionRateLimits: map[string]Limit{"CreateVolume": {RequestsPerSecond: 0, Burst: 1}},
			Stuck:            []string{"volume-create", "volume-delete", "attach", "detach", "modify", "snapshot"},
		}, true},
		{"rate above 1", Config{Errors: map[string]ErrorFault{"*": {Rate: 1.5, Code: "InternalError"}}}, false},
		{"negative rate", Config{Errors: map[string]ErrorFault{"*": {Rate: -0.1, Code: "InternalError"}}}, false},
		{"empty code", Config{Errors: map[string]ErrorFault{"*": {Rate: 1}}}, false},
		{"negative count", Config{Errors: map[string]ErrorFault{"*": {Rate: 1, Code: "X", Count: -1}}}, false},
		{"bad status", Config{Errors: map[string]ErrorFault{"*": {Rate: 1, Code: "X", Status: 200}}}, false},
		{"empty action", Config{Errors: map[string]ErrorFault{"": {Rate: 1, Code: "X"}}}, false},
		{"negative latency", Config{Latency: map[string]Duration{"*": -1}}, false},
		{"negative burst", Config{RateLimit: Limit{RequestsPerSecond: 1, Burst: -1}}, false},
		{"negative rps", Config{ActionRateLimits: map[string]Limit{"X": {RequestsPerSecond: -1, Burst: 1}}}, false},
		{"unknown transition", Config{Stuck: []string{"attach", "reboot"}}, false},
		{"profile", Config{RateLimitProfile: ProfileEC2}, true},
		{"unknown profile", Config{RateLimitProfile: "gce"}, false},
		{"prefix keys", Config{Latency: map[string]Duration{"Describe*": 0}, ActionRateLimits: map[string]Limit{"DescribeVolumes:unfiltered": {RequestsPerSecond: 1, Burst: 1}}}, true},
		{"star inside a key", Config{Errors: map[string]ErrorFault{"*Volume": {Rate: 1, Code: "X"}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inj := mustNew(t, Config{Stuck: []string{TransitionModify}})
			err := inj.SetConfig(tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("SetConfig err = %v, want ok=%v", err, tt.ok)
			}
			if !tt.ok && !inj.Stuck(TransitionModify) {
				t.Error("rejected config replaced the live one")
			}
			if _, err := New(tt.cfg); (err == nil) != tt.ok {
				t.Errorf("New err = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestConfigIsACopy(t *testing.T) {
	in := Config{Errors: map[string]ErrorFault{"*": {Rate: 1, Code: "X"}}, Stuck: []string{"attach"}}
	inj := mustNew(t, in)
	in.Errors["*"] = ErrorFault{Rate: 0, Code: "Y"}
	in.Stuck[0] = "detach"
	out := inj.Config()
	out.Errors["*"] = ErrorFault{Rate: 0, Code: "Z"}
	if got := inj.Config(); got.Errors["*"].Code != "X" || !inj.Stuck("attach") {
		t.Errorf("live config changed through a caller's maps: %+v", got)
	}
}

func TestNilInjector(t *testing.T) {
	var inj *Injector
	if err := inj.Before(context.Background(), "CreateVolume"); err != nil {
		t.Error(err)
	}
	if err := inj.After("CreateVolume"); err != nil {
		t.Error(err)
	}
	if inj.Stuck(TransitionAttach) {
		t.Error("nil injector stuck")
	}
	if err := inj.SetConfig(Config{}); err == nil {
		t.Error("SetConfig on nil injector succeeded")
	}
}

// TestConcurrentUse is for the race detector.
func TestConcurrentUse(t *testing.T) {
	inj := mustNew(t, Config{
		Latency:   map[string]Duration{"*": Duration(time.Millisecond)},
		Errors:    map[string]ErrorFault{"*": {Rate: 0.5, Code: "InternalError", Count: 50}},
		RateLimit: Limit{RequestsPerSecond: 1000, Burst: 10},
	}, WithSleep((&sleepRecorder{}).Sleep))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 100 {
				_ = inj.Before(context.Background(), "CreateVolume")
				_ = inj.After("CreateVolume")
				_ = inj.Stuck(TransitionAttach)
				if g == 0 {
					_ = inj.SetConfig(inj.Config())
				}
			}
		})
	}
	wg.Wait()
}
