package fakecloud_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/iolimits"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func withIOLimits(on bool) func(*fakecloudtest.Options) {
	return func(o *fakecloudtest.Options) { o.IOLimits = on }
}

// limitedDevice creates a volume, attaches it and returns its ID and loop device.
func limitedDevice(tb testing.TB, env *fakecloudtest.Env, in *ec2.CreateVolumeInput) (string, string) {
	tb.Helper()
	c := env.EC2(tb)
	ctx := context.Background()
	in.AvailabilityZone = aws.String(zoneA)
	out, err := c.CreateVolume(ctx, in)
	if err != nil {
		tb.Fatalf("CreateVolume: %v", err)
	}
	vol := aws.ToString(out.VolumeId)
	fakecloudtest.WaitFor(tb, 10*time.Second, "volume available", func(ctx context.Context) (bool, error) {
		v, _, err := env.Server.State.DescribeVolumes(state.DescribeInput{IDs: []string{vol}})
		return err == nil && len(v) == 1 && v[0].State == state.VolumeAvailable, err
	})
	if _, err := c.AttachVolume(ctx, &ec2.AttachVolumeInput{VolumeId: &vol, InstanceId: aws.String(env.Instances[zoneA]),
		Device: aws.String("/dev/xvdbd")}); err != nil {
		tb.Fatalf("AttachVolume: %v", err)
	}
	var dev string
	fakecloudtest.WaitFor(tb, 10*time.Second, "loop device", func(context.Context) (bool, error) {
		dev = env.Server.Backend.DevicePath(vol)
		return dev != "", nil
	})
	return vol, dev
}

// modifyIOPS modifies the volume's IOPS and waits until the modification is optimizing (in effect).
func modifyIOPS(tb testing.TB, env *fakecloudtest.Env, vol string, iops int32) {
	tb.Helper()
	c := env.EC2(tb)
	if _, err := c.ModifyVolume(context.Background(), &ec2.ModifyVolumeInput{VolumeId: &vol, Iops: aws.Int32(iops)}); err != nil {
		tb.Fatalf("ModifyVolume: %v", err)
	}
	fakecloudtest.WaitFor(tb, 10*time.Second, "modification optimizing", func(ctx context.Context) (bool, error) {
		out, err := c.DescribeVolumesModifications(ctx, &ec2.DescribeVolumesModificationsInput{VolumeIds: []string{vol}})
		if err != nil || len(out.VolumesModifications) != 1 {
			return false, err
		}
		s := out.VolumesModifications[0].ModificationState
		return s == types.VolumeModificationStateOptimizing || s == types.VolumeModificationStateCompleted, nil
	})
}

// ioRun is what a run of direct reads achieved.
type ioRun struct {
	ios     int64
	bytes   int64
	elapsed time.Duration
}

func (r ioRun) iops() float64 { return float64(r.ios) / r.elapsed.Seconds() }
func (r ioRun) mibps() float64 {
	return float64(r.bytes) / (1 << 20) / r.elapsed.Seconds()
}

// directReads reads size bytes at random aligned offsets of the device's first span bytes with O_DIRECT, from
// depth goroutines at once (queue depth), until n reads are done or, when n is 0, until d has passed.
func directReads(tb testing.TB, dev string, size, span int64, depth int, n int64, d time.Duration) ioRun {
	tb.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var (
		done    atomic.Int64
		firstEr atomic.Value
		wg      sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for g := 0; g < depth; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := testutil.AlignedBuf(int(size))
			for {
				if n > 0 && done.Add(1) > n {
					return
				}
				if n == 0 && time.Now().After(deadline) {
					return
				}
				off := rand.Int64N(span/size) * size
				if _, err := f.ReadAt(buf, off); err != nil {
					firstEr.CompareAndSwap(nil, err)
					return
				}
				if n == 0 {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstEr.Load().(error); err != nil {
		tb.Fatalf("direct read of %s: %v", dev, err)
	}
	ios := done.Load()
	if n > 0 {
		ios = n
	}
	return ioRun{ios: ios, bytes: ios * size, elapsed: time.Since(start)}
}

// statsOf is the limits policy's counters of a volume: zero before its first I/O.
func statsOf(env *fakecloudtest.Env, vol string) iolimits.Stats {
	st, _ := env.Server.IOLimits.Stats(vol)
	return st
}

// TestProvisionedIOPSThroughDevice: through the real loop device, an io2 volume at 100 IOPS is held to that
// rate, and ModifyVolume to 1,000 IOPS raises it. The assertions are on what the policy counted and asked to
// wait, and on wall-time lower bounds that sleeping guarantees; the measured rates are logged.
func TestProvisionedIOPSThroughDevice(t *testing.T) {
	env := startLoopCloud(t, fakecloud.BackendFuse, withIOLimits(true))
	vol, dev := limitedDevice(t, env, &ec2.CreateVolumeInput{Size: aws.Int32(4), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(100)})
	const span = 256 << 20

	before := statsOf(env, vol)
	slow := directReads(t, dev, 4096, span, 1, 300, 0)
	after := statsOf(env, vol)
	t.Logf("io2 at 100 IOPS: %d 4 KiB reads at QD1 in %v: %.0f IOPS; the policy counted %d I/Os and asked %d waits adding to %v",
		slow.ios, slow.elapsed, slow.iops(), after.IOs-before.IOs, after.Waits-before.Waits, after.Waited-before.Waited)
	if after.Limits.IOPS != 100 {
		t.Fatalf("limits in effect %+v, want 100 IOPS", after.Limits)
	}
	if got := after.IOs - before.IOs; got < slow.ios {
		t.Fatalf("the policy saw %d of %d reads", got, slow.ios)
	}
	// The policy held the reads back: at most a second's worth (100) came out of the full bucket, and then one
	// every 10 ms, less what each read's own service time had earned. So 300 reads take at least 2 s, and the
	// policy asked some to wait (the device alone runs thousands of IOPS).
	if after.Waits == before.Waits {
		t.Fatalf("the policy asked no read to wait")
	}
	if slow.elapsed < 1950*time.Millisecond || slow.iops() > 155 {
		t.Fatalf("300 reads took %v (%.0f IOPS); 100 IOPS allow no less than 2s", slow.elapsed, slow.iops())
	}
	// The time held at the IOPS limit is reported, on fakecloud's /metrics too; 300 reads of 4 KiB are far below
	// the volume's throughput.
	if after.ExceededIOPS <= before.ExceededIOPS || after.ExceededThroughput != 0 {
		t.Fatalf("exceeded IOPS %v → %v, throughput %v: want IOPS grown, throughput 0", before.ExceededIOPS, after.ExceededIOPS, after.ExceededThroughput)
	}
	rec := httptest.NewRecorder()
	env.Server.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	series := fmt.Sprintf("diskforge_fakecloud_volume_exceeded_iops_seconds_total{volume_id=%q} ", vol)
	if !strings.Contains(rec.Body.String(), series) {
		t.Fatalf("/metrics lacks %s", series)
	}

	modifyIOPS(t, env, vol, 1000)
	// The limits are looked up again within 250 ms, on the next I/O.
	fakecloudtest.WaitFor(t, 10*time.Second, "1,000 IOPS in effect", func(context.Context) (bool, error) {
		directReads(t, dev, 4096, span, 1, 1, 0)
		return statsOf(env, vol).Limits.IOPS == 1000, nil
	})
	before = statsOf(env, vol)
	fast := directReads(t, dev, 4096, span, 1, 2000, 0)
	after = statsOf(env, vol)
	t.Logf("io2 modified to 1,000 IOPS: %d 4 KiB reads at QD1 in %v: %.0f IOPS; the policy asked %d waits adding to %v",
		fast.ios, fast.elapsed, fast.iops(), after.Waits-before.Waits, after.Waited-before.Waited)
	// 1,000 from the bucket, then 1 ms apart: at least about 1 s for 2,000, and the policy never asks more
	// than the rate implies.
	if waited := after.Waited - before.Waited; waited > 1100*time.Millisecond {
		t.Fatalf("the policy asked for %v of waits for 2,000 reads at 1,000 IOPS, want at most about 1s", waited)
	}
	if fast.elapsed < 900*time.Millisecond {
		t.Fatalf("2,000 reads took %v; 1,000 IOPS allow no less than about 1s", fast.elapsed)
	}
	// Generous: the machine's raw rate through FUSE is a few thousand IOPS at QD1.
	if fast.iops() < 2*slow.iops() {
		t.Fatalf("after the modification %.0f IOPS, before %.0f: not clearly higher", fast.iops(), slow.iops())
	}
}

// BenchmarkProvisionedIOPS measures, through the real loop device of the fuse backend, what a gp3 volume at
// its defaults (3,000 IOPS, 125 MiB/s) and an io2 volume modified from 100 to 2,000 IOPS achieve, with the I/O
// limits on and off: 4 KiB random reads at queue depth 8 (iops) and 1 MiB random reads at depth 4 (MiB/s).
// Each sub-benchmark first spends a second and a half untimed, so the bucket's one-second burst is gone.
//
//	go test -run '^$' -bench ProvisionedIOPS -benchtime 3s ./pkg/fakecloud/
func BenchmarkProvisionedIOPS(b *testing.B) {
	cases := []struct {
		name   string
		in     *ec2.CreateVolumeInput
		modify int32
	}{
		{"gp3-default", &ec2.CreateVolumeInput{Size: aws.Int32(8), VolumeType: types.VolumeTypeGp3}, 0},
		{"io2-100-to-2000", &ec2.CreateVolumeInput{Size: aws.Int32(8), VolumeType: types.VolumeTypeIo2, Iops: aws.Int32(100)}, 2000},
	}
	for _, tc := range cases {
		for _, limits := range []bool{true, false} {
			for _, shape := range []struct {
				name  string
				size  int64
				depth int
			}{{"4KiB-qd8", 4096, 8}, {"1MiB-qd4", 1 << 20, 4}} {
				b.Run(fmt.Sprintf("%s/limits=%v/%s", tc.name, limits, shape.name), func(b *testing.B) {
					env := startLoopCloud(b, fakecloud.BackendFuse, withIOLimits(limits))
					in := *tc.in
					vol, dev := limitedDevice(b, env, &in)
					if tc.modify > 0 {
						modifyIOPS(b, env, vol, tc.modify)
					}
					const span = 4 << 30
					directReads(b, dev, shape.size, span, shape.depth, 0, 1500*time.Millisecond)
					b.ResetTimer()
					r := directReads(b, dev, shape.size, span, shape.depth, int64(b.N), 0)
					b.StopTimer()
					b.ReportMetric(r.iops(), "iops")
					b.ReportMetric(r.mibps(), "MiB/s")
				})
			}
		}
	}
}
