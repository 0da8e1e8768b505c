package faults_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// TestProfileOnTheWire runs the ec2 profile in a real fakecloud: a throttled call reaches the SDK as
// RequestLimitExceeded over HTTP 503, and /metrics counts it per action. Buckets that never refill (an
// override, RPS 0) keep the test free of timing.
func TestProfileOnTheWire(t *testing.T) {
	env := fakecloudtest.Start(t, fakecloudtest.Options{Faults: faults.Config{
		RateLimitProfile: faults.ProfileEC2,
		ActionRateLimits: map[string]faults.Limit{"DescribeAvailabilityZones": {RequestsPerSecond: 0, Burst: 2}},
	}})
	client := env.EC2(t, fakecloudtest.RetryConnectionsOnly)
	ctx := context.Background()
	for range 2 {
		if _, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}); err != nil {
			t.Fatalf("within the bucket: %v", err)
		}
	}
	_, err := client.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	var apiErr smithy.APIError
	var respErr *awshttp.ResponseError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "RequestLimitExceeded" || !errors.As(err, &respErr) ||
		respErr.HTTPStatusCode() != http.StatusServiceUnavailable {
		t.Fatalf("past the bucket: %v, want RequestLimitExceeded over 503", err)
	}
	// Other actions keep their own profile buckets.
	if _, err := client.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{}); err != nil {
		t.Fatalf("another Describe: %v", err)
	}

	resp, err := http.Get(env.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`diskforge_fakecloud_throttled_total{action="DescribeAvailabilityZones"} 1`,
		`diskforge_fakecloud_requests_total{action="DescribeAvailabilityZones",code="RequestLimitExceeded"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), `diskforge_fakecloud_throttled_total{action="DescribeInstanceTypes"}`) {
		t.Error("/metrics counts a throttle that did not happen")
	}
}
