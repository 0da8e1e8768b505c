package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/cloud"
)

// checkVolumes counts the driver's volumes (those tagged with a CSI name) fakecloud still holds, once none is
// still being deleted: left counts them all, duplicated those whose name's CreateVolume answered another
// volume, which the caller could never have deleted, and attachments their attachments. given maps each name
// to the volume ID it was answered.
func checkVolumes(ctx context.Context, url string, given map[string]string) (left, duplicated, attachments int, err error) {
	client := ec2.New(ec2.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		// Under --rate-limits the check is throttled like any client; it is outside the measurement.
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 20 }),
	})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var vols []ec2types.Volume
		// Paged, so the check draws from DescribeVolumes' own bucket, not the unfiltered one.
		pages := ec2.NewDescribeVolumesPaginator(client, &ec2.DescribeVolumesInput{MaxResults: aws.Int32(500)})
		for pages.HasMorePages() {
			out, err := pages.NextPage(ctx)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("list fakecloud's volumes: %w", err)
			}
			vols = append(vols, out.Volumes...)
		}
		deleting := false
		left, duplicated, attachments = 0, 0, 0
		for _, v := range vols {
			name := tag(v.Tags, cloud.TagName)
			if name == "" {
				continue
			}
			deleting = deleting || v.State == ec2types.VolumeStateDeleting
			left++
			attachments += len(v.Attachments)
			if id, ok := given[name]; ok && id != aws.ToString(v.VolumeId) {
				duplicated++
			}
		}
		if !deleting {
			return left, duplicated, attachments, nil
		}
		if err := ctxsleep.Sleep(ctx, 200*time.Millisecond); err != nil {
			return 0, 0, 0, fmt.Errorf("volumes still deleting: %w", err)
		}
	}
}

func tag(tags []ec2types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// refillBuckets puts fakecloud's fault config back as it is, which starts its rate-limit buckets full again.
func refillBuckets(ctx context.Context, url string) error {
	do := func(method string, body []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, url+"/admin/faults", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		out, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s /admin/faults: %d %s", method, resp.StatusCode, out)
		}
		return out, err
	}
	cfg, err := do(http.MethodGet, nil)
	if err != nil {
		return fmt.Errorf("refill buckets: %w", err)
	}
	if _, err := do(http.MethodPut, cfg); err != nil {
		return fmt.Errorf("refill buckets: %w", err)
	}
	return nil
}
