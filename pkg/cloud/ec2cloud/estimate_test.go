package ec2cloud

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/state"
)

func TestDurationEstimates(t *testing.T) {
	// notDone: when the last look that saw the resource not done was sent (0: none); done: the look that saw
	// it done.
	type sample struct{ notDone, done time.Duration }
	ms := time.Millisecond
	cases := []struct {
		name    string
		samples []sample
		want    time.Duration
	}{
		{"no history polls by the schedule", nil, 0},
		{"too few waits", []sample{{time.Second, time.Second}, {time.Second, time.Second}}, 0},
		{"lower quartile", []sample{{5000 * ms, 5000 * ms}, {1000 * ms, 1000 * ms}, {900 * ms, 900 * ms}, {1100 * ms, 1100 * ms}}, 1000 * ms},
		// Seen done at the first look: the transition may have been much shorter, so the sample counts half.
		{"seen done at once shrinks", []sample{{0, 1000 * ms}, {0, 1000 * ms}, {0, 1000 * ms}}, 500 * ms},
		// Done between a look at 0.9 s and one at 1.3 s: the middle, 1.1 s.
		{"the middle of the bracket", []sample{{900 * ms, 1300 * ms}, {900 * ms, 1300 * ms}, {900 * ms, 1300 * ms}}, 1100 * ms},
		// A late look after an early one (another wait's) counts the bracket, not the late look.
		{"an early look keeps a late one from inflating", []sample{{100 * ms, 1300 * ms}, {100 * ms, 1300 * ms}, {100 * ms, 1300 * ms}}, 700 * ms},
		{"below the floor polls at once", []sample{{100 * ms, 100 * ms}, {100 * ms, 100 * ms}, {100 * ms, 100 * ms}}, 0},
		{"only the recent window counts", append(repeat(sample{10 * time.Second, 10 * time.Second}, 40), repeat(sample{time.Second, time.Second}, estimateWindow/4+1)...), time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newDurationEstimates(200 * ms)
			for _, s := range tc.samples {
				e.record(waitAttach, s.notDone, s.done)
			}
			if got := e.firstPoll(waitAttach); got != tc.want {
				t.Errorf("firstPoll = %v, want %v", got, tc.want)
			}
			if got := e.firstPoll(waitCreate); got != 0 {
				t.Errorf("another kind's firstPoll = %v, want 0 (kinds are learned apart)", got)
			}
		})
	}
}

// TestDurationEstimatesTrackChanges: an estimate that became too long (the cloud got faster) comes down within
// a few waits, since a wait that sees its resource done at the first poll counts half.
func TestDurationEstimatesTrackChanges(t *testing.T) {
	e := newDurationEstimates(0)
	for range estimateWindow {
		e.record(waitCreate, 4*time.Second, 4*time.Second)
	}
	waits := 0
	for e.firstPoll(waitCreate) > 500*time.Millisecond {
		// The cloud now takes 200 ms: the wait polls first at the stale estimate and sees it done.
		e.record(waitCreate, 0, e.firstPoll(waitCreate))
		waits++
		if waits > 3*estimateWindow {
			t.Fatalf("estimate still %v after %d fast waits", e.firstPoll(waitCreate), waits)
		}
	}
	t.Logf("estimate from 3.6s to under 0.5s after %d waits", waits)
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestLearnedFirstPollSavesDescribes: once creates have shown how long creation takes, the next ones sleep
// through it and need two or three DescribeVolumes each instead of the schedule's five or six: the first poll
// comes at the lower quartile of the past durations, so it often finds the volume still creating. Both counts
// come from fakecloud's own metrics; a loaded machine only stretches the schedule, which lowers them.
func TestLearnedFirstPollSavesDescribes(t *testing.T) {
	const create = 400 * time.Millisecond
	run := func(t *testing.T, fixed bool) float64 {
		e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeCreate: create}}, func(o *Options) {
			// The production schedule, so that the comparison is the one a real cloud sees.
			o.Wait = WaitOptions{FixedSchedule: fixed}
		})
		ctx := ctxTimeout(t, time.Minute)
		// Creates one after the other: each wait starts on an idle cloud. Half a window of them, so that the
		// coarse samples of the first waits, which polled by the schedule alone, no longer set the estimate.
		for i := range estimateWindow / 2 {
			if _, err := e.CreateDisk(ctx, fmt.Sprintf("warm-%d", i), cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
				t.Fatal(err)
			}
		}
		before := e.calls(t)["DescribeVolumes"]
		const measured = 5
		for i := range measured {
			if _, err := e.CreateDisk(ctx, fmt.Sprintf("measured-%d", i), cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
				t.Fatal(err)
			}
		}
		return (e.calls(t)["DescribeVolumes"] - before) / measured
	}
	fixed := run(t, true)
	learned := run(t, false)
	t.Logf("DescribeVolumes per create of %v: fixed schedule %.1f, learned first poll %.1f", create, fixed, learned)
	if learned > 3 {
		t.Errorf("learned first poll: %.1f DescribeVolumes per create, want at most 3", learned)
	}
	if learned >= fixed {
		t.Errorf("learned first poll made %.1f calls per create, the fixed schedule %.1f: nothing saved", learned, fixed)
	}
}

// TestLearnedFirstPollWithinDeadline: an estimate longer than the caller's deadline (a transition that used to
// be slow) does not make the wait sleep past it: it polls within the deadline and sees the disk ready.
func TestLearnedFirstPollWithinDeadline(t *testing.T) {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeCreate: 100 * time.Millisecond}}, func(o *Options) {
		o.Wait = WaitOptions{}
	})
	for range estimateWindow {
		e.estimates.record(waitCreate, time.Minute, time.Minute)
	}
	ctx := ctxTimeout(t, 3*time.Second)
	if _, err := e.CreateDisk(ctx, "slow-estimate", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
		t.Fatalf("CreateDisk with a 3s deadline under a 54s estimate: %v", err)
	}
}

// TestSettledBurstLooksTwice: waits that learned a 1 s transition and start spread over 80 ms, as a burst of
// creates is accepted, see it end with two looks: the first, due when the earliest wait's sleep ends, and one
// a settle interval later, which serves the rest. With Initial (50 ms) after the sleep there were three, every
// time. A loaded machine (CI runs packages side by side) can stall a wait past the settle interval and cost a
// third look, so the burst gets three tries to show two looks.
func TestSettledBurstLooksTwice(t *testing.T) {
	const create, spread, waits, tries = time.Second, 80 * time.Millisecond, 12, 3
	var looks []float64
	for range tries {
		n := settledBurstLooks(t, create, spread, waits)
		if n <= 2 {
			return
		}
		looks = append(looks, n)
	}
	t.Errorf("%d waits spread over %v took %v DescribeVolumes in %d tries, want 2", waits, spread, looks, tries)
}

// settledBurstLooks runs one burst of waits that learned the create's duration and counts its DescribeVolumes.
func settledBurstLooks(t *testing.T, create, spread time.Duration, waits int) float64 {
	e := newTestEnv(t, fakecloudtest.Options{Durations: state.Durations{VolumeCreate: create}}, func(o *Options) {
		o.Wait = WaitOptions{Jitter: -1}
	})
	for range estimateWindow {
		e.estimates.record(waitCreate, create, create)
	}
	ctx := ctxTimeout(t, time.Minute)
	before := e.calls(t)["DescribeVolumes"]
	var wg sync.WaitGroup
	for i := range waits {
		wg.Go(func() {
			time.Sleep(spread * time.Duration(i) / time.Duration(waits-1))
			if _, err := e.CreateDisk(ctx, fmt.Sprintf("burst-%d", i), cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return e.calls(t)["DescribeVolumes"] - before
}

// TestWaitDisturbedRecordsNothing: a wait whose poll failed, or whose look came long after its interval (a
// cloud that was down while the SDK retried), measured the outage rather than the transition; it must leave
// the estimate as it was. An undisturbed wait records its sample.
func TestWaitDisturbedRecordsNothing(t *testing.T) {
	cases := []struct {
		name string
		// disturb runs in the fetch of the numbered call (1 is the first) and returns its error.
		disturb func(call int) error
		want    int
	}{
		{"undisturbed", func(int) error { return nil }, 1},
		{"a poll fails", func(call int) error {
			if call == 2 {
				return newError("DescribeVolumes", cloud.ErrUnavailable, "connection refused")
			}
			return nil
		}, 0},
		{"a look comes late", func(call int) error {
			if call == 2 {
				time.Sleep(1500 * time.Millisecond) // longer than lateLook past its interval
			}
			return nil
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cloud{wait: WaitOptions{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1}.withDefaults(),
				metrics: newMetrics(nil), estimates: newDurationEstimates(0)}
			var mu sync.Mutex
			calls := 0
			fetch := func(_ context.Context, ids []string) (map[string]int, error) {
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if err := tc.disturb(n); err != nil {
					return nil, err
				}
				return map[string]int{ids[0]: n}, nil
			}
			b := newBatcher("test", fetch, c.wait, c.metrics, nil)
			err := waitFor(context.Background(), c, b, waitCreate, "vol-w", func(o observation[int]) (bool, error) {
				if o.err != nil {
					return false, transientPollError(o.err, "volume created", "vol-w")
				}
				return o.value >= 4, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			c.estimates.mu.Lock()
			got := len(c.estimates.samples[waitCreate])
			c.estimates.mu.Unlock()
			if got != tc.want {
				t.Errorf("samples recorded = %d, want %d", got, tc.want)
			}
		})
	}
}

// switchProxy forwards to a fakecloud that can be stopped and started again on the same data directory;
// while none runs, connections are dropped, as a cloud that is down drops them.
type switchProxy struct {
	mu     sync.Mutex
	target *url.URL
}

func (p *switchProxy) set(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = nil
	if target != "" {
		p.target, _ = url.Parse(target)
	}
}

func (p *switchProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	if target == nil {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
}

// TestWaitSpanningOutageRecordsNothing: fakecloud stopped and started again while a create waits. The create
// ends once the cloud is back, but its wait measured the outage and must not teach the estimate.
func TestWaitSpanningOutageRecordsNothing(t *testing.T) {
	const create = 300 * time.Millisecond
	dir := t.TempDir()
	fo := fakecloudtest.Options{DataDir: dir, NoSync: true, Durations: state.Durations{VolumeCreate: create}}
	fc := fakecloudtest.Start(t, fo)
	proxy := &switchProxy{}
	proxy.set(fc.URL)
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	o := fastOptions(fc, prometheus.NewRegistry())
	o.Endpoint = front.URL
	c, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range estimateMinSamples {
		if _, err := c.CreateDisk(testCtx(t), fmt.Sprintf("pvc-learn-%d", i), cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
			t.Fatal(err)
		}
	}
	samples := func() int {
		c.estimates.mu.Lock()
		defer c.estimates.mu.Unlock()
		return len(c.estimates.samples[waitCreate])
	}
	before := samples()

	done := make(chan error, 1)
	go func() {
		_, err := c.CreateDisk(testCtx(t), "pvc-outage", cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		done <- err
	}()
	time.Sleep(create / 3)
	proxy.set("")
	fc.Close()
	time.Sleep(2 * time.Second)
	fc = fakecloudtest.Start(t, fo)
	proxy.set(fc.URL)
	if err := <-done; err != nil {
		t.Fatalf("create across the outage: %v", err)
	}
	if got := samples(); got != before {
		t.Errorf("create samples %d -> %d: the wait that spanned the outage was recorded (estimate now %v, transition %v)",
			before, got, c.estimates.firstPoll(waitCreate), create)
	}
}
