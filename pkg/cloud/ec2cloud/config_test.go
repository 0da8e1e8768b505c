package ec2cloud

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// isolateSDKConfig points the SDK's configuration chain at nothing, so the test decides what it finds.
func isolateSDKConfig(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
		"AWS_SESSION_TOKEN": "", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_EC2": "", "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
}

func TestNewNeedsRegionAndWholeKeys(t *testing.T) {
	isolateSDKConfig(t)
	if _, err := New(context.Background(), Options{Endpoint: "http://127.0.0.1:1"}); err == nil {
		t.Error("New without a region succeeded")
	}
	if _, err := New(context.Background(), Options{Region: "us-east-1", AccessKeyID: "AKID"}); err == nil {
		t.Error("New with half a static key succeeded")
	}
}

// TestConfigFromSDKChain: region, credentials and endpoint from the SDK's standard environment variables,
// against a fakecloud that checks SigV4 signatures.
func TestConfigFromSDKChain(t *testing.T) {
	isolateSDKConfig(t)
	fc := fakecloudtest.Start(t, fakecloudtest.Options{NoSync: true, AccessKeys: map[string]string{"AKIDCHAIN": "chain-secret"}})
	t.Setenv("AWS_REGION", fc.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDCHAIN")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "chain-secret")
	t.Setenv("AWS_ENDPOINT_URL_EC2", fc.URL)
	c, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Region() != fc.Region {
		t.Errorf("region %q, want %q", c.Region(), fc.Region)
	}
	if _, err := c.ListZones(testCtx(t)); err != nil {
		t.Fatalf("ListZones with credentials from the environment: %v", err)
	}

	// Static keys override the chain; a wrong secret is refused.
	bad, err := New(context.Background(), Options{Endpoint: fc.URL, AccessKeyID: "AKIDCHAIN", SecretAccessKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.ListZones(testCtx(t))
	wantKinds(t, err, cloud.ErrPermissionDenied)
}

// TestBurstsReuseConnections: a burst of parallel calls leaves its connections open for the next burst. The
// SDK's client keeps 10, so every burst of the driver's (100 CreateVolumes, then their attaches) would open
// most of its connections anew: TCP and, against EC2, TLS handshakes.
func TestBurstsReuseConnections(t *testing.T) {
	isolateSDKConfig(t)
	// Each call takes 100 ms, so that a burst holds all its calls in flight at once and needs a connection
	// each: without it, calls that end before others start share connections, and how many the first burst
	// opened says nothing of how many the second needs.
	fc := fakecloudtest.Start(t, fakecloudtest.Options{NoSync: true,
		Faults: faults.Config{Latency: map[string]faults.Duration{"DescribeAvailabilityZones": faults.Duration(100 * time.Millisecond)}}})
	// Unpaced: a fresh pacer lets a first burst go a few calls at a time, as it learns the account's bucket.
	c, err := New(context.Background(), Options{Endpoint: fc.URL, Region: fc.Region,
		AccessKeyID: fakecloudtest.AccessKeyID, SecretAccessKey: fakecloudtest.SecretAccessKey, Pace: PaceOptions{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	const parallel = 40
	burst := func() {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range parallel {
			wg.Go(func() {
				<-start
				// ListZones is not batched: one call each.
				if _, err := c.ListZones(testCtx(t)); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	burst()
	first := fc.Connections()
	if first < parallel {
		t.Fatalf("the first burst of %d calls opened %d connections; want one each", parallel, first)
	}
	burst()
	if opened := fc.Connections() - first; opened > parallel/8 {
		t.Errorf("the second burst of %d calls opened %d connections (the first opened %d); want them reused", parallel, opened, first)
	}
}
