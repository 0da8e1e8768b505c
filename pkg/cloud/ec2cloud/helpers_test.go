package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

const (
	zoneA = "us-east-1a"
	zoneB = "us-east-1b"
)

// testEnv is a Cloud against an in-process fakecloud, with the registry its metrics go to.
type testEnv struct {
	*Cloud
	fc  *fakecloudtest.Env
	reg *prometheus.Registry
}

// fastOptions poll and retry quickly, so tests stay short; the logic is the same as in production.
func fastOptions(fc *fakecloudtest.Env, reg prometheus.Registerer) Options {
	return Options{
		Endpoint: fc.URL, Region: fc.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey,
		Wait:       WaitOptions{Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond, ConsistencyGrace: 500 * time.Millisecond},
		Retry:      RetryOptions{BaseDelay: 2 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
		Registerer: reg,
	}
}

// newTestEnv starts fakecloud with fo and a Cloud on it; mod adjusts the Cloud's options.
func newTestEnv(t testing.TB, fo fakecloudtest.Options, mod ...func(*Options)) *testEnv {
	t.Helper()
	fo.NoSync = true
	fc := fakecloudtest.Start(t, fo)
	reg := prometheus.NewRegistry()
	o := fastOptions(fc, reg)
	for _, m := range mod {
		m(&o)
	}
	c, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &testEnv{Cloud: c, fc: fc, reg: reg}
}

// sameZoneCloud is a cloud with two instances in zone A (and one in B), for in-use tests.
func sameZoneCloud(limit int) *state.Config {
	c := fakecloud.DefaultCloud()
	c.Instances = []state.InstanceSpec{
		{ID: "i-0a000000000000001", Zone: zoneA, AttachmentLimit: limit},
		{ID: "i-0a000000000000002", Zone: zoneA, AttachmentLimit: limit},
		{ID: "i-0b000000000000002", Zone: zoneB, AttachmentLimit: limit},
	}
	return &c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testCtx(t testing.TB) context.Context { return ctxTimeout(t, 20*time.Second) }

func (e *testEnv) mustCreate(t testing.TB, name string, opts cloud.DiskOptions) *cloud.Disk {
	t.Helper()
	if opts.Zone == "" {
		opts.Zone = zoneA
	}
	if opts.SizeGiB == 0 && opts.SnapshotID == "" {
		opts.SizeGiB = 1
	}
	d, err := e.CreateDisk(testCtx(t), name, opts)
	if err != nil {
		t.Fatalf("CreateDisk %s: %v", name, err)
	}
	return d
}

// raw is a plain SDK client on the same fakecloud, for setting up state behind the Cloud's back.
func (e *testEnv) raw(t testing.TB) *ec2.Client { return e.fc.EC2(t) }

// volumeCount counts the volumes fakecloud holds (in any state).
func (e *testEnv) volumeCount(t testing.TB) int {
	t.Helper()
	out, err := e.raw(t).DescribeVolumes(testCtx(t), &ec2.DescribeVolumesInput{})
	if err != nil {
		t.Fatalf("DescribeVolumes: %v", err)
	}
	return len(out.Volumes)
}

// rawVolume describes one volume directly.
func (e *testEnv) rawVolume(t testing.TB, id string) ec2types.Volume {
	t.Helper()
	out, err := e.raw(t).DescribeVolumes(testCtx(t), &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
	if err != nil || len(out.Volumes) != 1 {
		t.Fatalf("DescribeVolumes %s: %v", id, err)
	}
	return out.Volumes[0]
}

// calls sums diskforge_cloud_api_requests_total by action (and by action/code under "action/code").
func (e *testEnv) calls(t testing.TB) map[string]float64 {
	t.Helper()
	return requestCounts(t, e.reg)
}

func requestCounts(t testing.TB, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != metricRequests {
			continue
		}
		for _, m := range mf.GetMetric() {
			action, code := label(m, "action"), label(m, "code")
			out[action] += m.GetCounter().GetValue()
			out[action+"/"+code] += m.GetCounter().GetValue()
			out["total"] += m.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// wantKinds checks err against sentinels: every one in want must match, every other known one must not.
func wantKinds(t testing.TB, err error, want ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %v", want)
	}
	all := []error{cloud.ErrNotFound, cloud.ErrAlreadyExists, cloud.ErrIdempotentParameterMismatch, cloud.ErrInvalidArgument,
		cloud.ErrLimitExceeded, cloud.ErrZoneMismatch, cloud.ErrInUse, cloud.ErrIncorrectState, cloud.ErrUnavailable,
		cloud.ErrThrottled, cloud.ErrPermissionDenied, cloud.ErrFailed, cloud.ErrInsufficientCapacity, cloud.ErrInstanceGone,
		cloud.ErrAttachmentStuck}
	for _, s := range all {
		wanted := false
		for _, w := range want {
			if w == s {
				wanted = true
			}
		}
		if got := errors.Is(err, s); got != wanted {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, wanted)
		}
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func hasAttachment(v ec2types.Volume, instanceID string) bool {
	for _, a := range v.Attachments {
		if aws.ToString(a.InstanceId) == instanceID {
			return true
		}
	}
	return false
}

func isDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
