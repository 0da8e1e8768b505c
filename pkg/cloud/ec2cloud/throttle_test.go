package ec2cloud

import (
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// TestThrottlingStormConverges: 30 concurrent creates against an account limited to 20 requests per second
// (burst 5) all succeed, through the SDK's retries and the waits' patience, with the default retry settings
// (adaptive mode: it slows CreateVolume down on the client once throttled; 10 attempts per call) and a fast
// backoff.
func TestThrottlingStormConverges(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{
		Durations: state.Durations{VolumeCreate: 50 * time.Millisecond},
		Faults:    faults.Config{RateLimit: faults.Limit{RequestsPerSecond: 20, Burst: 5}},
	}, func(o *Options) {
		o.Retry = RetryOptions{BaseDelay: 50 * time.Millisecond, MaxBackoff: time.Second}
	})
	const n = 30
	var wg sync.WaitGroup
	for _, name := range names("pvc-storm", n) {
		wg.Go(func() {
			if _, err := e.CreateDisk(ctxTimeout(t, 30*time.Second), name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()
	if err := e.fc.Server.Faults.SetConfig(faults.Config{}); err != nil {
		t.Fatal(err)
	}
	if got := e.volumeCount(t); got != n {
		t.Errorf("fakecloud holds %d volumes, want %d", got, n)
	}
	calls := e.calls(t)
	if calls["CreateVolume/RequestLimitExceeded"]+calls["DescribeVolumes/RequestLimitExceeded"] == 0 {
		t.Errorf("no throttling happened; the test proves nothing: %v", calls)
	}
	t.Logf("calls: %v", calls)
}

// TestThrottledWhenRetriesRunOut: a call still throttled after its last attempt is ErrThrottled (and
// ErrUnavailable), with every attempt counted.
func TestThrottledWhenRetriesRunOut(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateVolume": {Rate: 1, Code: "RequestLimitExceeded", Before: true},
		"DeleteVolume": {Rate: 1, Code: "InternalError", Before: true},
	}}}, func(o *Options) { o.Retry.MaxAttempts, o.Retry.Mode = 3, RetryModeStandard })
	_, err := e.CreateDisk(testCtx(t), "pvc-throttled", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
	wantKinds(t, err, cloud.ErrThrottled, cloud.ErrUnavailable)
	wantKinds(t, e.DeleteDisk(testCtx(t), "vol-0123456789abcdef0"), cloud.ErrUnavailable)
	calls := e.calls(t)
	if calls["CreateVolume/RequestLimitExceeded"] != 3 || calls["DeleteVolume/InternalError"] != 3 {
		t.Errorf("attempts: %v; want 3 of each", calls)
	}
}

// TestCapacityAnsweredAtOnce: EC2 sends InsufficientVolumeCapacity with a 500, which the SDK would retry; it is
// answered after one attempt.
func TestCapacityAnsweredAtOnce(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateVolume": {Rate: 1, Code: "InsufficientVolumeCapacity", Before: true},
	}}})
	_, err := e.CreateDisk(testCtx(t), "pvc-full", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
	wantKinds(t, err, cloud.ErrInsufficientCapacity)
	if n := e.calls(t)["CreateVolume/InsufficientVolumeCapacity"]; n != 1 {
		t.Errorf("%v attempts, want 1", n)
	}
}

// TestRetryBudgetPerAction: CreateVolume exhausting its retry budget leaves AttachVolume's intact.
func TestRetryBudgetPerAction(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(0)}, func(o *Options) {
		o.Retry.Tokens, o.Retry.Mode = 10, RetryModeStandard // two throttled retries (5 tokens each) per action
	})
	d := e.mustCreate(t, "pvc-budget", cloud.DiskOptions{})
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateVolume": {Rate: 1, Code: "RequestLimitExceeded", Before: true},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names("pvc-starved", 3) {
		_, err := e.CreateDisk(testCtx(t), name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		wantKinds(t, err, cloud.ErrThrottled, cloud.ErrUnavailable)
	}
	// CreateVolume's budget is spent: its last call could not retry at all.
	if got := e.calls(t)["CreateVolume/RequestLimitExceeded"]; got >= 3*10 {
		t.Fatalf("CreateVolume made %v attempts; its budget did not bind", got)
	}
	if err := e.fc.Server.Faults.SetConfig(faults.Config{Errors: map[string]faults.ErrorFault{
		"AttachVolume": {Rate: 1, Code: "RequestLimitExceeded", Before: true, Count: 2},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AttachDisk(testCtx(t), d.ID, inst1); err != nil {
		t.Fatalf("AttachDisk with its own budget: %v", err)
	}
	if got := e.calls(t)["AttachVolume/RequestLimitExceeded"]; got != 2 {
		t.Errorf("AttachVolume throttled %v times, want 2 (then retried to success)", got)
	}
}

// TestWaitsRideOutDescribeFailures: throttled and failing polls do not end a wait.
func TestWaitsRideOutDescribeFailures(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
		"DescribeVolumes": {Rate: 1, Code: "RequestLimitExceeded", Before: true, Count: 12},
	}}}, func(o *Options) { o.Retry.DescribeMaxAttempts = 2 })
	e.mustCreate(t, "pvc-patient", cloud.DiskOptions{})
	if got := e.calls(t)["DescribeVolumes/RequestLimitExceeded"]; got != 12 {
		t.Errorf("DescribeVolumes throttled %v times, want 12", got)
	}
}

// TestConcurrentWaitsShareDescribes: concurrent creates need far fewer DescribeVolumes than creates.
func TestConcurrentWaitsShareDescribes(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeCreate: 100 * time.Millisecond}})
	const n = 30
	var wg sync.WaitGroup
	for _, name := range names("pvc-share", n) {
		wg.Go(func() { e.mustCreate(t, name, cloud.DiskOptions{}) })
	}
	wg.Wait()
	calls := e.calls(t)
	if calls["DescribeVolumes"] >= n {
		t.Errorf("%d creates made %v DescribeVolumes calls; want fewer than one each", n, calls["DescribeVolumes"])
	}
	t.Logf("%d creates: %v DescribeVolumes", n, calls["DescribeVolumes"])
}
