package iolimits

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/diskforge/diskforge/internal/testutil"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock/fuseblocktest"
)

// harness is a Policy on a fake clock whose sleeper records the waits asked and, when advance is set, moves
// the clock by them (one client issuing its requests one after another).
type harness struct {
	p       *Policy
	clock   *testutil.Clock
	advance bool

	mu      sync.Mutex
	waits   []time.Duration
	specs   map[string]Spec
	lookups int
}

func newHarness(t *testing.T, advance bool, specs map[string]Spec) *harness {
	t.Helper()
	h := &harness{clock: testutil.NewClock(), advance: advance, specs: specs}
	h.p = New(Options{
		Lookup: func(id string) (Spec, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.lookups++
			s, ok := h.specs[id]
			return s, ok
		},
		Now: h.clock.Now,
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.mu.Lock()
			h.waits = append(h.waits, d)
			h.mu.Unlock()
			if h.advance {
				h.clock.Advance(d)
			}
			return ctx.Err()
		},
	})
	return h
}

func (h *harness) setSpec(id string, s Spec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.specs[id] = s
}

// do issues n requests of one kind and returns the waits they were asked to sleep.
func (h *harness) do(t *testing.T, id string, op fuseblock.Op, size int64, n int) []time.Duration {
	t.Helper()
	h.mu.Lock()
	start := len(h.waits)
	h.mu.Unlock()
	for i := 0; i < n; i++ {
		if err := h.p.Before(context.Background(), fuseblock.IO{Volume: id, Op: op, Off: int64(i) * size, Len: size}); err != nil {
			t.Fatalf("Before: %v", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.waits[start:]...)
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// near reports whether got is within 1% (or 1 ms) of want.
func near(got, want time.Duration) bool {
	return math.Abs(float64(got-want)) <= math.Max(float64(want)/100, float64(time.Millisecond))
}

func TestOps(t *testing.T) {
	ssd, hdd := ForSpec(Spec{Type: "gp3"}), ForSpec(Spec{Type: "st1", SizeGiB: 500})
	cases := []struct {
		l    Limits
		n    int64
		want float64
	}{
		{ssd, 0, 1}, {ssd, 4 << 10, 1}, {ssd, 256 << 10, 1}, {ssd, 256<<10 + 1, 2}, {ssd, 1 << 20, 4},
		{hdd, 4 << 10, 1}, {hdd, 1 << 20, 1}, {hdd, 1<<20 + 512, 2},
		{ForSpec(Spec{Type: "standard"}), 1 << 20, 1},
	}
	for _, tc := range cases {
		if got := tc.l.Ops(tc.n); got != tc.want {
			t.Errorf("Ops(%d) with unit %d = %v, want %v", tc.n, tc.l.Unit, got, tc.want)
		}
	}
}

func TestForSpec(t *testing.T) {
	cases := []struct {
		spec Spec
		want Limits
	}{
		{Spec{Type: "gp3", SizeGiB: 10}, Limits{Unit: ssdUnit, IOPS: 3000, Throughput: 125 * mib}},
		{Spec{Type: "gp3", SizeGiB: 100, Iops: 16000, Throughput: 1000}, Limits{Unit: ssdUnit, IOPS: 16000, Throughput: 1000 * mib}},
		{Spec{Type: "gp2", SizeGiB: 10, Iops: 100}, Limits{Unit: ssdUnit, IOPS: 100, Throughput: 128 * mib, BurstIOPS: 3000, IOPSCredits: 5.4e6}},
		{Spec{Type: "gp2", SizeGiB: 500}, Limits{Unit: ssdUnit, IOPS: 1500, Throughput: 250 * mib, BurstIOPS: 3000, IOPSCredits: 5.4e6}},
		{Spec{Type: "gp2", SizeGiB: 2000}, Limits{Unit: ssdUnit, IOPS: 6000, Throughput: 250 * mib}},
		{Spec{Type: "gp2", SizeGiB: 16384}, Limits{Unit: ssdUnit, IOPS: 16000, Throughput: 250 * mib}},
		{Spec{Type: "io1", SizeGiB: 100, Iops: 1000}, Limits{Unit: ssdUnit, IOPS: 1000, Throughput: 250 * mib}},
		{Spec{Type: "io1", SizeGiB: 2000, Iops: 64000}, Limits{Unit: ssdUnit, IOPS: 64000, Throughput: 1000 * mib}},
		{Spec{Type: "io2", SizeGiB: 10, Iops: 100}, Limits{Unit: ssdUnit, IOPS: 100, Throughput: 25 * mib}},
		{Spec{Type: "io2", SizeGiB: 100, Iops: 64000}, Limits{Unit: ssdUnit, IOPS: 64000, Throughput: 4000 * mib}},
		{Spec{Type: "st1", SizeGiB: 1024}, Limits{Unit: hddUnit, IOPS: 500, Throughput: 40 * mib, BurstThroughput: 250 * mib, ThroughputCredits: 1024 * gib}},
		{Spec{Type: "st1", SizeGiB: 16384}, Limits{Unit: hddUnit, IOPS: 500, Throughput: 500 * mib, BurstThroughput: 500 * mib, ThroughputCredits: 16384 * gib}},
		{Spec{Type: "sc1", SizeGiB: 2048}, Limits{Unit: hddUnit, IOPS: 250, Throughput: 24 * mib, BurstThroughput: 160 * mib, ThroughputCredits: 2048 * gib}},
		{Spec{Type: "standard", SizeGiB: 8}, Limits{Unit: hddUnit, IOPS: 100, Throughput: 90 * mib}},
		{Spec{Type: "gp9", SizeGiB: 8}, Limits{}},
	}
	for _, tc := range cases {
		if got := ForSpec(tc.spec); got != tc.want {
			t.Errorf("ForSpec(%+v) = %+v, want %+v", tc.spec, got, tc.want)
		}
	}
}

// TestSustainedRate: a client at queue depth 1 gets a second's worth of operations at once, then one every
// 1/IOPS, whatever the volume's type; the waits asked add up to what the rate allows.
func TestSustainedRate(t *testing.T) {
	cases := []struct {
		name  string
		spec  Spec
		size  int64
		n     int
		free  int           // requests served from the full bucket
		total time.Duration // sum of the waits of all n
	}{
		{"io2 100 IOPS 4 KiB", Spec{Type: "io2", SizeGiB: 10, Iops: 100}, 4 << 10, 300, 100, 2 * time.Second},
		{"io2 1000 IOPS 4 KiB", Spec{Type: "io2", SizeGiB: 10, Iops: 1000}, 4 << 10, 3000, 1000, 2 * time.Second},
		// 1 MiB counts as 4 operations: 100 IOPS is 25 I/Os a second, as is 25 MiB/s.
		{"io2 100 IOPS 1 MiB", Spec{Type: "io2", SizeGiB: 10, Iops: 100}, 1 << 20, 75, 25, 2 * time.Second},
		// gp3's default: 3000 IOPS allow 750 MiB I/Os a second, 125 MiB/s only 125.
		{"gp3 throughput 1 MiB", Spec{Type: "gp3", SizeGiB: 10}, 1 << 20, 375, 125, 2 * time.Second},
		{"gp3 IOPS 4 KiB", Spec{Type: "gp3", SizeGiB: 10}, 4 << 10, 9000, 3000, 2 * time.Second},
		// HDD: a 1 MiB I/O is one operation; 40 MiB/s per TiB bursting to 250: the burst rate applies.
		{"st1 burst 1 MiB", Spec{Type: "st1", SizeGiB: 1024}, 1 << 20, 750, 250, 2 * time.Second},
		{"standard 4 KiB", Spec{Type: "standard", SizeGiB: 8}, 4 << 10, 300, 100, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true, map[string]Spec{"vol-1": tc.spec})
			waits := h.do(t, "vol-1", fuseblock.OpRead, tc.size, tc.n)
			if len(waits) != tc.n-tc.free {
				t.Errorf("%d of %d requests waited, want %d", len(waits), tc.n, tc.n-tc.free)
			}
			if got := sum(waits); !near(got, tc.total) {
				t.Errorf("waits add up to %v, want %v", got, tc.total)
			}
			st, ok := h.p.Stats("vol-1")
			if !ok || st.IOs != int64(tc.n) || st.Bytes != int64(tc.n)*tc.size || st.Waits != int64(len(waits)) {
				t.Errorf("Stats = %+v, %v", st, ok)
			}
		})
	}
}

// TestQueuedRequests: requests arriving together beyond the bucket wait in turn, each for the debts before it.
func TestQueuedRequests(t *testing.T) {
	h := newHarness(t, false, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	h.do(t, "vol-1", fuseblock.OpWrite, 4096, 100) // empties the bucket
	waits := h.do(t, "vol-1", fuseblock.OpWrite, 4096, 3)
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}
	for i := range want {
		if i >= len(waits) || !near(waits[i], want[i]) {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
}

// TestLargerThanBucket: a request bigger than the bucket still passes, after its deficit.
func TestLargerThanBucket(t *testing.T) {
	h := newHarness(t, false, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	h.p.opts.Window = 10 * time.Millisecond // 1 operation, 256 KiB
	waits := h.do(t, "vol-1", fuseblock.OpRead, 1<<20, 1)
	// 4 operations of a 1-operation bucket, and 1 MiB of a 256 KiB one: 3 operations' (768 KiB's) worth.
	if len(waits) != 1 || !near(waits[0], 30*time.Millisecond) {
		t.Fatalf("waits %v, want [30ms]", waits)
	}
}

// TestFlushAndDiscard: fsync is free; a fallocate counts one operation and no bytes, however long.
func TestFlushAndDiscard(t *testing.T) {
	h := newHarness(t, false, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	h.do(t, "vol-1", fuseblock.OpFsync, 0, 500)
	if waits := h.do(t, "vol-1", fuseblock.OpFallocate, 8<<30, 100); len(waits) != 0 {
		t.Fatalf("100 discards within the bucket waited %v", waits)
	}
	st, _ := h.p.Stats("vol-1")
	if st.IOs != 100 || st.Ops != 100 || st.Bytes != 0 {
		t.Fatalf("Stats = %+v, want 100 fallocates of no bytes and no fsync", st)
	}
	if waits := h.do(t, "vol-1", fuseblock.OpFallocate, 8<<30, 1); len(waits) != 1 || !near(waits[0], 10*time.Millisecond) {
		t.Fatalf("a discard past the bucket waited %v, want [10ms]", waits)
	}
}

// TestRefreshAfterModification: limits are looked up once per Refresh, not per request, and a modification
// is enforced from the next lookup; the debt run up under the old limits carries over.
func TestRefreshAfterModification(t *testing.T) {
	h := newHarness(t, true, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	h.do(t, "vol-1", fuseblock.OpRead, 4096, 100)
	if h.lookups != 1 {
		t.Fatalf("%d lookups for 100 requests at one instant, want 1", h.lookups)
	}
	h.setSpec("vol-1", Spec{Type: "io2", SizeGiB: 10, Iops: 1000})
	// Within the refresh period the old limits hold: 10 ms a request.
	if waits := h.do(t, "vol-1", fuseblock.OpRead, 4096, 5); len(waits) != 5 || !near(sum(waits), 50*time.Millisecond) {
		t.Fatalf("before the refresh: waits %v, want 5×10ms", waits)
	}
	h.clock.Advance(DefaultRefresh) // also earns 25 operations at the old rate
	waits := h.do(t, "vol-1", fuseblock.OpRead, 4096, 1025)
	// 25 earned, then 1000 more at 1 ms each: 1 s of waits.
	if got := sum(waits); !near(got, time.Second) {
		t.Fatalf("after the modification: waits add up to %v, want 1s", got)
	}
	st, _ := h.p.Stats("vol-1")
	if st.Limits.IOPS != 1000 {
		t.Fatalf("limits in effect %+v, want 1000 IOPS", st.Limits)
	}
	if h.lookups < 2 || h.lookups > 6 { // one a refresh period of the 1.3 s simulated
		t.Fatalf("%d lookups", h.lookups)
	}
}

// TestBurstCredits: below its baseline's 3,000, a gp2 volume runs at the peak rate while it holds credits and
// falls back to the baseline once they are spent; idling earns them back.
func TestBurstCredits(t *testing.T) {
	clock := testutil.NewClock()
	v := &volume{}
	v.set(clock.Now(), Limits{Unit: ssdUnit, IOPS: 100, BurstIOPS: 1000, IOPSCredits: 2000}, time.Second, "vol-1")
	took := func(n int) (waited time.Duration) {
		for i := 0; i < n; i++ {
			d := v.take(clock.Now(), 4096)
			clock.Advance(d)
			waited += d
		}
		return waited
	}
	// 2000 credits (and 100/s earned meanwhile) last about 2,200 I/Os at the peak rate: the first 1,000 from
	// the full peak bucket, the rest 1 ms apart.
	if w := took(2000); !near(w, time.Second) {
		t.Fatalf("2000 I/Os on credits waited %v, want 1s (peak rate)", w)
	}
	took(200) // spends what was earned meanwhile
	if w := took(100); !near(w, time.Second) {
		t.Fatalf("100 I/Os without credits waited %v, want 1s (baseline)", w)
	}
	clock.Advance(20 * time.Second) // earns 2000 credits back
	if w := took(1000); w > 100*time.Millisecond {
		t.Fatalf("after idling, 1000 I/Os waited %v, want none (credits and peak bucket full)", w)
	}
}

// TestUnknownVolume: a volume the lookup does not know passes unlimited and leaves nothing behind.
func TestUnknownVolume(t *testing.T) {
	h := newHarness(t, false, map[string]Spec{})
	if waits := h.do(t, "vol-x", fuseblock.OpWrite, 1<<20, 1000); len(waits) != 0 {
		t.Fatalf("unknown volume waited %v", waits)
	}
	if _, ok := h.p.Stats("vol-x"); ok {
		t.Fatal("unknown volume has stats")
	}
	if _, ok := h.p.volumes.Load("vol-x"); ok {
		t.Fatal("unknown volume still cached")
	}
}

// TestWaitEndsWithContext: the real sleep returns when the filesystem's context ends.
func TestWaitEndsWithContext(t *testing.T) {
	p := New(Options{Lookup: func(string) (Spec, bool) { return Spec{Type: "io2", SizeGiB: 10, Iops: 100}, true }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	for i := 0; i < 200 && err == nil; i++ { // the first 100 are in the bucket
		err = p.Before(ctx, fuseblock.IO{Volume: "vol-1", Op: fuseblock.OpRead, Len: 4096})
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Before with an ended context: %v, want context.Canceled", err)
	}
}

// TestConcurrentVolumes: many volumes and requests at once (run with -race); each volume's count is its own.
func TestConcurrentVolumes(t *testing.T) {
	specs := map[string]Spec{}
	ids := []string{"vol-1", "vol-2", "vol-3", "vol-4"}
	for _, id := range ids {
		specs[id] = Spec{Type: "gp3", SizeGiB: 10}
	}
	h := newHarness(t, false, specs)
	var wg sync.WaitGroup
	for _, id := range ids {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 500; i++ {
					_ = h.p.Before(context.Background(), fuseblock.IO{Volume: id, Op: fuseblock.OpWrite, Len: 4096})
				}
			}()
		}
	}
	wg.Wait()
	for _, id := range ids {
		st, ok := h.p.Stats(id)
		// The first request of a volume may pass before its lookup has answered another one.
		if !ok || st.IOs < 1990 || st.IOs > 2000 {
			t.Errorf("%s: %+v %v", id, st, ok)
		}
	}
}

// TestDeletedVolumeForgotten: a deleted volume's buckets go when the fuse backend deletes it (fuseblock's
// Forget), although no request of it follows to find it unknown.
func TestDeletedVolumeForgotten(t *testing.T) {
	h := newHarness(t, false, map[string]Spec{"vol-1": {Type: "io2", SizeGiB: 10, Iops: 100}})
	m := fuseblocktest.Serve(t, fuseblock.Chain(fuseblock.NopPolicy{}, h.p))
	m.Create("vol-1", 1<<20)
	m.Read("vol-1", 0, 4096)
	if _, ok := h.p.Stats("vol-1"); !ok {
		t.Fatal("the policy did not see the volume's read")
	}
	m.Delete("vol-1")
	if _, ok := h.p.volumes.Load("vol-1"); ok {
		t.Fatal("the deleted volume's buckets are still kept")
	}
}
