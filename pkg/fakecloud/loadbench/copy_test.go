// Package loadbench benchmarks fakecloud's API while block I/O runs: the state lock must not be held across a
// large copy, or every caller (the driver's batched polls first) waits for it. It holds only benchmarks,
// apart from `go test -bench .` of pkg/fakecloud because one run writes and copies gigabytes.
package loadbench

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
)

const (
	clients    = 20
	volumes    = 50
	copyGiB    = 4
	idleWindow = 5 * time.Second
)

// BenchmarkDescribeVolumesDuringSnapshotCopy measures DescribeVolumes latency from 20 concurrent SDK clients,
// first idle, then while CreateSnapshot copies a 4 GiB volume holding 4 GiB of non-zero data, and reports
// both side by side (the machine is shared, so only one run's numbers compare).
func BenchmarkDescribeVolumesDuringSnapshotCopy(b *testing.B) {
	env := fakecloudtest.Start(b, fakecloudtest.Options{})
	ctx := context.Background()
	c := env.EC2(b)
	for range volumes {
		if _, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(1)}); err != nil {
			b.Fatal(err)
		}
	}
	big, err := c.CreateVolume(ctx, &ec2.CreateVolumeInput{AvailabilityZone: aws.String("us-east-1a"), Size: aws.Int32(copyGiB)})
	if err != nil {
		b.Fatal(err)
	}
	fillNonZero(b, env.Server.Backend.VolumeFile(aws.ToString(big.VolumeId)), copyGiB<<30)
	ec2s := make([]*ec2.Client, clients)
	for i := range ec2s {
		ec2s[i] = env.EC2(b)
	}

	for b.Loop() {
		idle := describeLoad(ec2s, func(stop chan struct{}) { time.Sleep(idleWindow); close(stop) })
		var answerTime, copyTime time.Duration
		during := describeLoad(ec2s, func(stop chan struct{}) {
			defer close(stop)
			start := time.Now()
			out, err := c.CreateSnapshot(ctx, &ec2.CreateSnapshotInput{VolumeId: big.VolumeId})
			answerTime = time.Since(start)
			if err != nil {
				b.Error(err)
				return
			}
			// CreateSnapshot answers pending; the copy runs until the snapshot completes.
			for {
				snaps, err := c.DescribeSnapshots(ctx, &ec2.DescribeSnapshotsInput{SnapshotIds: []string{aws.ToString(out.SnapshotId)}})
				if err != nil {
					b.Error(err)
					return
				}
				if snaps.Snapshots[0].State != types.SnapshotStatePending {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			copyTime = time.Since(start)
		})
		if len(during) < clients {
			b.Fatalf("only %d describes ran during the copy", len(during))
		}
		b.ReportMetric(percentile(idle, 0.5), "idle-p50-ms")
		b.ReportMetric(percentile(idle, 0.99), "idle-p99-ms")
		b.ReportMetric(percentile(during, 0.5), "copy-p50-ms")
		b.ReportMetric(percentile(during, 0.99), "copy-p99-ms")
		b.ReportMetric(copyTime.Seconds(), "copy-s")
		b.ReportMetric(float64(answerTime.Milliseconds()), "create-snapshot-ms")
		b.ReportMetric(float64(len(during)), "copy-calls")
	}
}

// describeLoad runs DescribeVolumes in a loop on every client until run closes stop, and returns the latency
// of every call.
func describeLoad(cs []*ec2.Client, run func(stop chan struct{})) []time.Duration {
	stop := make(chan struct{})
	var (
		mu  sync.Mutex
		all []time.Duration
		wg  sync.WaitGroup
	)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
					return
				default:
				}
				start := time.Now()
				if _, err := c.DescribeVolumes(context.Background(), &ec2.DescribeVolumesInput{}); err == nil {
					mine = append(mine, time.Since(start))
				}
			}
		}()
	}
	run(stop)
	wg.Wait()
	return all
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
}

// fillNonZero writes size bytes of a non-zero pattern over the file, so that a copy has every block to move.
func fillNonZero(b *testing.B, path string, size int64) {
	b.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i%251 + 1)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}
