package blockdev_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/blockdev"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/iofaults"
	"github.com/diskforge/diskforge/pkg/fakecloud/iolimits"
)

// Two volumes on one fuse backend: vol-a is held (a hang fault) or throttled (a 100-IOPS io2 limit) under
// isolationQD concurrent reads, and vol-b must go on as if vol-a were idle.
const (
	isolationVolBytes = 64 << 20
	isolationBlock    = 4 << 10
	isolationQD       = 200
	// isolationIOPS is vol-a's limit; vol-b is not limited.
	isolationIOPS = 100
)

// isolationRig is the two attached volumes and the policies acting on vol-a.
type isolationRig struct {
	faults     *iofaults.Injector
	devA, devB string
}

func newIsolationRig(t testing.TB) *isolationRig {
	t.Helper()
	ctx := context.Background()
	faults := iofaults.New(iofaults.Options{})
	limits := iolimits.New(iolimits.Options{Lookup: func(volumeID string) (iolimits.Spec, bool) {
		if volumeID == "vol-a" {
			return iolimits.Spec{Type: "io2", SizeGiB: 1, Iops: isolationIOPS}, true
		}
		return iolimits.Spec{}, false
	}})
	b := blockdev.NewFuseBackendT(t, t.TempDir(), fuseblock.Chain(faults, limits))
	// Registered after the backend, so it runs first: held requests are let go before Close.
	t.Cleanup(faults.Clear)
	r := &isolationRig{faults: faults}
	for _, v := range []struct {
		id  string
		dev *string
	}{{"vol-a", &r.devA}, {"vol-b", &r.devB}} {
		if err := b.CreateVolume(ctx, v.id, isolationVolBytes); err != nil {
			t.Fatal(err)
		}
		dev, err := b.Attach(ctx, v.id)
		if err != nil {
			t.Fatalf("Attach %s: %v", v.id, err)
		}
		*v.dev = dev
	}
	return r
}

// hang holds every I/O of vol-a until the returned function is called.
func (r *isolationRig) hang(t testing.TB) (release func()) {
	t.Helper()
	if err := r.faults.Set([]iofaults.Rule{{Volume: "vol-a", Effect: iofaults.EffectHang}}); err != nil {
		t.Fatal(err)
	}
	return r.faults.Clear
}

// held is how many of vol-a's requests the hang rule holds now.
func (r *isolationRig) held() int64 {
	var n int64
	for _, st := range r.faults.Rules() {
		n += st.Held
	}
	return n
}

// loadA keeps isolationQD 4 KiB O_DIRECT reads in flight on vol-a until stop is called; stop waits for them.
func loadA(t testing.TB, dev string) (stop func()) {
	t.Helper()
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range isolationQD {
		wg.Go(func() {
			f, err := os.OpenFile(dev, unix.O_RDONLY|unix.O_DIRECT, 0)
			if err != nil {
				t.Errorf("open %s: %v", dev, err)
				return
			}
			defer f.Close()
			buf := testutil.AlignedBuf(isolationBlock)
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for !done.Load() {
				if _, err := f.ReadAt(buf, rng.Int64N(isolationVolBytes/isolationBlock)*isolationBlock); err != nil {
					t.Errorf("read %s: %v", dev, err)
					return
				}
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { done.Store(true); wg.Wait() }) }
}

// waitHeld waits until the hang holds at least n of vol-a's requests.
func (r *isolationRig) waitHeld(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.held() < n {
		if time.Now().After(deadline) {
			t.Fatalf("hang holds %d of vol-a's requests after 10 s, want %d", r.held(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFuseHeldVolumeDoesNotStallOthers: with vol-a's loop device full of requests a hang fault holds, a read on
// vol-b still completes. When every volume shared the mount's 128 background slots, the held requests took
// them all and vol-b's read waited for the hang's release.
func TestFuseHeldVolumeDoesNotStallOthers(t *testing.T) {
	r := newIsolationRig(t)
	release := r.hang(t)
	stop := loadA(t, r.devA)
	t.Cleanup(stop)
	t.Cleanup(release) // before stop: the held reads must end for stop to return
	// The loop device keeps at most its queue depth (128 by default) in flight: that many are held.
	r.waitHeld(t, int64(min(isolationQD, loopQueueDepth(t, r.devA))))

	readB := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(r.devB, unix.O_RDONLY|unix.O_DIRECT, 0)
		if err == nil {
			_, err = f.ReadAt(testutil.AlignedBuf(isolationBlock), 4096)
			f.Close()
		}
		readB <- err
	}()
	select {
	case err := <-readB:
		if err != nil {
			t.Fatalf("read on vol-b: %v", err)
		}
	case <-time.After(10 * time.Second):
		release()
		<-readB
		t.Fatalf("a read on vol-b did not complete in 10 s while vol-a's requests were held; it completed only once they were released")
	}
}

// loopQueueDepth is how many requests the device keeps in flight at most.
func loopQueueDepth(t testing.TB, dev string) int {
	t.Helper()
	raw, err := os.ReadFile("/sys/block/" + dev[len("/dev/"):] + "/queue/nr_requests")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(string(raw), &n); err != nil {
		t.Fatalf("nr_requests of %s: %q", dev, raw)
	}
	return n
}

// qd1Result is vol-b's 4 KiB random reads at queue depth 1 over one window.
type qd1Result struct {
	ops           int
	elapsed       time.Duration
	p50, p99, max time.Duration
}

func (q qd1Result) iops() float64 { return float64(q.ops) / q.elapsed.Seconds() }
func (q qd1Result) mean() time.Duration {
	return q.elapsed / time.Duration(max(q.ops, 1))
}

// isolationWindow is how long vol-b is measured; isolationGiveUp is when a hung vol-a is released anyway,
// so that a run on a backend that stalls vol-b ends (and shows the stall as one read of that length).
const (
	isolationWindow = time.Second
	isolationGiveUp = 5 * time.Second
)

// readQD1 reads 4 KiB at random offsets of dev, one at a time, for window.
func readQD1(b *testing.B, dev string, window time.Duration) qd1Result {
	b.Helper()
	f, err := os.OpenFile(dev, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := testutil.AlignedBuf(isolationBlock)
	rng := rand.New(rand.NewPCG(2, 5))
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < window {
		t0 := time.Now()
		if _, err := f.ReadAt(buf, rng.Int64N(isolationVolBytes/isolationBlock)*isolationBlock); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	q := qd1Result{ops: len(lat), elapsed: time.Since(start)}
	slices.Sort(lat)
	q.p50, q.p99, q.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	return q
}

// isolationRounds: the cases run in turn this many times, and each reports its median round, so that a
// noisy moment of a shared machine falls on one round of one case rather than on a whole case.
const isolationRounds = 7

// BenchmarkFuseIsolation measures vol-b's 4 KiB O_DIRECT random reads at queue depth 1 while vol-a, on the
// same fuse backend, is idle, hung (a hang fault holding its reads) or throttled (at its 100-IOPS io2 limit),
// vol-a under 200 concurrent reads in the last two, side by side in one run:
//
//	go test -run '^$' -bench FuseIsolation -benchtime 1x ./pkg/fakecloud/blockdev/
//
// It reports vol-b's IOPS and mean and p99 latency per case (the median of isolationRounds rounds, by IOPS),
// and logs each against idle.
func BenchmarkFuseIsolation(b *testing.B) {
	r := newIsolationRig(b)
	cases := []struct {
		name  string
		start func(b *testing.B) (stop func())
	}{
		{"idle", func(*testing.B) func() { return func() {} }},
		{"hung", func(b *testing.B) func() {
			release := r.hang(b)
			stopA := loadA(b, r.devA)
			r.waitHeld(b, int64(min(isolationQD, loopQueueDepth(b, r.devA))))
			giveUp := time.AfterFunc(isolationGiveUp, release)
			return func() { giveUp.Stop(); release(); stopA() }
		}},
		{"throttled", func(b *testing.B) func() {
			stopA := loadA(b, r.devA)
			time.Sleep(time.Second) // vol-a's 1 s burst is spent, its queue full
			return stopA
		}},
	}
	rounds := map[string][]qd1Result{}
	for b.Loop() {
		readQD1(b, r.devB, time.Second) // warm-up
		for range isolationRounds {
			for _, c := range cases {
				stop := c.start(b)
				rounds[c.name] = append(rounds[c.name], readQD1(b, r.devB, isolationWindow))
				stop()
			}
		}
	}
	median := func(name string) qd1Result {
		qs := slices.Clone(rounds[name])
		slices.SortFunc(qs, func(x, y qd1Result) int { return cmp.Compare(x.iops(), y.iops()) })
		return qs[len(qs)/2]
	}
	idle := median("idle")
	for _, c := range cases {
		q := median(c.name)
		b.ReportMetric(q.iops(), c.name+"-IOPS")
		b.ReportMetric(float64(q.mean().Microseconds()), c.name+"-mean-µs")
		b.ReportMetric(float64(q.p99.Microseconds()), c.name+"-p99-µs")
		b.Logf("vol-b QD1 with vol-a %-9s %7.0f IOPS (%.2fx idle), mean %8v (%.2fx idle), p50 %8v, p99 %8v, max %v",
			c.name+":", q.iops(), q.iops()/idle.iops(), q.mean().Round(time.Microsecond),
			float64(q.mean())/float64(idle.mean()), q.p50.Round(time.Microsecond), q.p99.Round(time.Microsecond),
			q.max.Round(time.Microsecond))
	}
}
