// Package fakecloudtest runs an in-process fakecloud for tests of any package, and gives them a real
// aws-sdk-go-v2 EC2 client pointed at it.
package fakecloudtest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/imds"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

// Test credentials; fakecloud accepts any unless AccessKeys are set.
const (
	AccessKeyID     = "AKIDFAKECLOUDTEST"
	SecretAccessKey = "fakecloud-test-secret"
)

// Options shape the test cloud. The zero value is the default cloud on the file backend with instant
// transitions and one instance per zone.
type Options struct {
	// Backend is file (default), loop or fuse.
	Backend string
	// IOLimits holds the fuse backend's volumes to their IOPS and throughput (fakecloud.Config.IOLimits).
	IOLimits bool
	// DataDir is reused when set (to restart on the same state); otherwise a temporary one is made.
	DataDir string
	// Cloud replaces the default cloud; its Instances default to one per zone (i-a…, i-b…, i-c…).
	Cloud     *state.Config
	Durations state.Durations
	Faults    faults.Config
	// AccessKeys turn SigV4 checking on (and guard /admin).
	AccessKeys map[string]string
	// AdminToken admits admin requests carrying it as a bearer token.
	AdminToken string
	NoSync     bool
	// Clock replaces the real clock (state.Clock).
	Clock state.Clock
	// WrapBackend wraps the block backend, to slow it down or cut it short.
	WrapBackend func(blockdev.Backend) blockdev.Backend
	// RestoreReadLatency slows first reads of restored volumes on the fuse backend (fakecloud.Config).
	RestoreReadLatency time.Duration
	// Recorder, when set, keeps every EC2 Query exchange and the parameter names fakecloud read.
	Recorder *Recorder
}

// Env is a running fakecloud.
type Env struct {
	URL     string
	Server  *fakecloud.Server
	DataDir string
	Region  string
	// Instances are the configured instance IDs by zone name.
	Instances map[string]string
	http      *httptest.Server
	closed    bool
	// conns counts the connections clients opened.
	conns atomic.Int64
}

// Instance IDs of the default test cloud, one per default zone.
const (
	InstanceA = "i-0a000000000000001"
	InstanceB = "i-0b000000000000002"
	InstanceC = "i-0c000000000000003"
)

// Start runs fakecloud until the test ends.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	cloud := fakecloud.DefaultCloud()
	if o.Cloud != nil {
		cloud = *o.Cloud
	} else {
		cloud.Instances = []state.InstanceSpec{{ID: InstanceA, Zone: "us-east-1a"}, {ID: InstanceB, Zone: "us-east-1b"}, {ID: InstanceC, Zone: "us-east-1c"}}
	}
	cloud.Durations = o.Durations
	if o.Backend == "" {
		o.Backend = fakecloud.BackendFile
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	checkModelAtEnd(t, &o)
	srv, err := fakecloud.New(fakecloud.Config{DataDir: o.DataDir, Backend: o.Backend, IOLimits: o.IOLimits, Cloud: cloud, Faults: o.Faults,
		AccessKeys: o.AccessKeys, AdminToken: o.AdminToken, NoSync: o.NoSync, Clock: o.Clock, WrapBackend: o.WrapBackend,
		RestoreReadLatency: o.RestoreReadLatency, ParamRead: paramRead(o.Recorder)})
	if err != nil {
		t.Fatalf("start fakecloud: %v", err)
	}
	handler := srv.Handler
	if o.Recorder != nil {
		handler = o.Recorder.wrap(handler)
	}
	// The production server's timeouts, so tests meet the same limits as clients of the binary.
	hs := httptest.NewUnstartedServer(handler)
	hs.Config = fakecloud.NewHTTPServer(handler, fakecloud.Timeouts{})
	e := &Env{Server: srv, DataDir: o.DataDir, Region: cloud.Region, Instances: map[string]string{}, http: hs}
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	hs.Start()
	e.URL = e.http.URL
	for _, in := range cloud.Instances {
		e.Instances[in.Zone] = in.ID
	}
	t.Cleanup(e.Close)
	return e
}

// Close stops the server (idempotent). Loop devices stay bound, as fakecloud keeps them across restarts; tests
// of the loop backend release them through the backend or by deleting their volumes.
func (e *Env) Close() {
	if e.closed {
		return
	}
	e.closed = true
	e.http.Close()
	_ = e.Server.Close()
}

// Connections is how many connections clients have opened to the server so far.
func (e *Env) Connections() int64 { return e.conns.Load() }

// IMDS serves the instance metadata service of instanceID until the test ends and returns its URL, as
// fakecloud's --imds flag does on a listener of the instance's own.
func (e *Env) IMDS(t testing.TB, instanceID string) string {
	t.Helper()
	hs := httptest.NewServer(imds.New(e.Server.State, instanceID).Router())
	t.Cleanup(hs.Close)
	return hs.URL
}

// EC2 returns a real SDK client for this cloud, retrying quickly so tests of throttling stay short.
func (e *Env) EC2(t testing.TB, optFns ...func(*ec2.Options)) *ec2.Client {
	t.Helper()
	opts := ec2.Options{
		Region:       e.Region,
		BaseEndpoint: aws.String(e.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		Retryer: retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxBackoff = 20 * time.Millisecond
		}),
	}
	return ec2.New(opts, optFns...)
}

// RetryConnectionsOnly is an ec2.Options change for tests that count throttled calls: an answer of the cloud
// (a RequestLimitExceeded too) comes back at once, and only a lost connection is tried again. Go's transport
// drops a kept-alive connection now and then after the SDK closes a request body it is still draining, so a
// test without any retry fails at random.
func RetryConnectionsOnly(o *ec2.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.Retryables = []retry.IsErrorRetryable{retry.RetryableConnectionError{}}
		so.MaxBackoff = 20 * time.Millisecond
		so.RateLimiter = ratelimit.None
	})
}

// RestartInstance stops the instance and starts it again through the EC2 API, waiting until it runs: its volumes
// stay attached, and its instance metadata lists them from now on, as EC2's lists the volumes of the last start.
func (e *Env) RestartInstance(t testing.TB, instanceID string) {
	t.Helper()
	c := e.EC2(t)
	ctx := context.Background()
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{instanceID}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []types.InstanceStateName{types.InstanceStateNameStopped, types.InstanceStateNameRunning} {
		WaitFor(t, 10*time.Second, "instance "+instanceID+" "+string(want), func(ctx context.Context) (bool, error) {
			out, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instanceID}})
			return err == nil && out.Reservations[0].Instances[0].State.Name == want, err
		})
		if want == types.InstanceStateNameStopped {
			if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{instanceID}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// WaitFor polls cond every few milliseconds until it holds or the timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lastErr error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (last error: %v)", what, lastErr)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
