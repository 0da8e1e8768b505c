package fakecloud_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func reportPercentiles(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) == 0 {
		return
	}
	at := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkDescribeVolumesPage pages through 10,000 volumes 500 at a time, through the real SDK client and as
// raw HTTP, and reports the latency of one page.
func BenchmarkDescribeVolumesPage(b *testing.B) {
	env := fakecloudtest.Start(b, fakecloudtest.Options{NoSync: true})
	size := int32(1)
	for i := range 10000 {
		if _, err := env.Server.State.CreateVolume(state.CreateVolumeInput{SizeGiB: &size, Zone: zoneA,
			Tags: []state.Tag{{Key: "n", Value: fmt.Sprint(i)}}}); err != nil {
			b.Fatal(err)
		}
	}
	c := env.EC2(b)
	ctx := context.Background()
	b.Run("sdk", func(b *testing.B) {
		var lat []time.Duration
		var token *string
		for b.Loop() {
			start := time.Now()
			out, err := c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(500), NextToken: token})
			lat = append(lat, time.Since(start))
			if err != nil || len(out.Volumes) != 500 {
				b.Fatalf("page: %d volumes, %v", len(out.Volumes), err)
			}
			token = out.NextToken
		}
		reportPercentiles(b, lat)
	})
	b.Run("http", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			resp, err := http.Post(env.URL+"/", "application/x-www-form-urlencoded", strings.NewReader("Action=DescribeVolumes&Version=2016-11-15&MaxResults=500"))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			lat = append(lat, time.Since(start))
		}
		reportPercentiles(b, lat)
	})
}

// BenchmarkMixedWorkload runs a controller-like mix of calls from concurrent SDK clients against a durable
// (fsynced) fakecloud and reports requests per second.
func BenchmarkMixedWorkload(b *testing.B) {
	env := fakecloudtest.Start(b, fakecloudtest.Options{})
	c := env.EC2(b)
	ctx := context.Background()
	var seed []string
	for range 200 {
		out, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneA)})
		if err != nil {
			b.Fatal(err)
		}
		seed = append(seed, aws.ToString(out.VolumeId))
	}
	var requests, next atomic.Int64
	b.SetParallelism(4)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			id := seed[n%int64(len(seed))]
			var err error
			switch n % 10 {
			case 0, 1, 2, 3:
				_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{VolumeIds: []string{id}})
			case 4:
				_, err = c.DescribeVolumes(ctx, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(50),
					Filters: []types.Filter{{Name: aws.String("status"), Values: []string{"available"}}}})
			case 5:
				_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String(fmt.Sprint(n))}}})
			case 6:
				_, err = c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
			default:
				var out *ec2.CreateVolumeOutput
				if out, err = c.CreateVolume(ctx, &ec2.CreateVolumeInput{Size: aws.Int32(1), AvailabilityZone: aws.String(zoneB)}); err == nil {
					requests.Add(1)
					_, err = c.DeleteVolume(ctx, &ec2.DeleteVolumeInput{VolumeId: out.VolumeId})
				}
			}
			if err != nil {
				b.Error(err)
			}
			requests.Add(1)
		}
	})
	b.ReportMetric(float64(requests.Load())/time.Since(start).Seconds(), "req/s")
}
