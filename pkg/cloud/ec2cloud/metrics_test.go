package ec2cloud

import (
	"context"
	"testing"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// TestMetricsCountEveryAttempt: the client counts each HTTP attempt per action and code, retries included,
// and agrees with fakecloud's own count.
func TestMetricsCountEveryAttempt(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{Errors: map[string]faults.ErrorFault{
		"CreateVolume": {Rate: 1, Code: "InternalError", Count: 1, Before: true},
	}}})
	before := fakecloudCalls(t, e.fc.URL)
	d := e.mustCreate(t, "pvc-metrics", cloud.DiskOptions{})
	wantKinds(t, e.DeleteDisk(testCtx(t), "vol-0123456789abcdef0"), cloud.ErrNotFound)
	if err := e.DeleteDisk(testCtx(t), d.ID); err != nil {
		t.Fatal(err)
	}

	calls := e.calls(t)
	for key, want := range map[string]float64{
		"CreateVolume/InternalError":          1,
		"CreateVolume/Success":                1,
		"DeleteVolume/InvalidVolume.NotFound": 1,
		"DeleteVolume/Success":                1,
	} {
		if calls[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, calls[key], want, calls)
		}
	}
	server := fakecloudCalls(t, e.fc.URL)
	if got := server["total"] - before["total"]; got != calls["total"] {
		t.Errorf("client counted %v calls, fakecloud %v", calls["total"], got)
	}
	durations := meanHistogram(t, e.reg, metricDuration, "action", nil)
	for _, action := range []string{"CreateVolume", "DescribeVolumes", "DeleteVolume"} {
		if _, ok := durations[action]; !ok {
			t.Errorf("no latency recorded for %s", action)
		}
	}
	if waits := meanHistogram(t, e.reg, metricWait, "operation", map[string]string{"result": "done"}); len(waits) != 1 {
		t.Errorf("wait durations recorded for %v, want create only", waits)
	}
}

// TestNoRegisterer: metrics are optional.
func TestNoRegisterer(t *testing.T) {
	fc := fakecloudtest.Start(t, fakecloudtest.Options{NoSync: true})
	c, err := New(context.Background(), fastOptions(fc, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListZones(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
