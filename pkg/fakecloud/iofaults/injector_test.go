package iofaults

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// sleeper records the delays asked for instead of sleeping.
type sleeper struct {
	mu    sync.Mutex
	asked []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.asked = append(s.asked, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newT(t *testing.T, rules ...Rule) (*Injector, *sleeper) {
	t.Helper()
	s := &sleeper{}
	inj := New(Options{Sleep: s.sleep})
	if err := inj.Set(rules); err != nil {
		t.Fatalf("Set: %v", err)
	}
	return inj, s
}

func read(vol string, off, n int64) fuseblock.IO {
	return fuseblock.IO{Volume: vol, Op: fuseblock.OpRead, Off: off, Len: n}
}
func write(vol string, off, n int64) fuseblock.IO {
	return fuseblock.IO{Volume: vol, Op: fuseblock.OpWrite, Off: off, Len: n}
}
func fsync(vol string) fuseblock.IO { return fuseblock.IO{Volume: vol, Op: fuseblock.OpFsync} }
func discard(vol string, off, n int64) fuseblock.IO {
	return fuseblock.IO{Volume: vol, Op: fuseblock.OpFallocate, Off: off, Len: n}
}

func TestMatching(t *testing.T) {
	t.Parallel()
	const v = "vol-1"
	tests := []struct {
		name string
		rule Rule
		io   fuseblock.IO
		want error
	}{
		{"whole volume, default EIO", Rule{Volume: v, Effect: EffectError}, read(v, 0, 4096), syscall.EIO},
		{"default ops include fsync", Rule{Volume: v, Effect: EffectError}, fsync(v), syscall.EIO},
		{"other volume", Rule{Volume: v, Effect: EffectError}, read("vol-2", 0, 4096), nil},
		{"any volume", Rule{Volume: Any, Effect: EffectError, Errno: "ENOSPC"}, write("vol-9", 0, 1), syscall.ENOSPC},
		{"op filtered out", Rule{Volume: v, Ops: []string{"read"}, Effect: EffectError}, write(v, 0, 4096), nil},
		{"op listed", Rule{Volume: v, Ops: []string{"read", "fallocate"}, Effect: EffectError}, discard(v, 0, 4096), syscall.EIO},
		{"range overlap at start", Rule{Volume: v, Offset: 8192, Length: 4096, Effect: EffectError}, read(v, 4096, 8192), syscall.EIO},
		{"range overlap inside", Rule{Volume: v, Offset: 8192, Length: 4096, Effect: EffectError}, read(v, 9000, 1), syscall.EIO},
		{"range ends before", Rule{Volume: v, Offset: 8192, Length: 4096, Effect: EffectError}, read(v, 4096, 4096), nil},
		{"range starts after", Rule{Volume: v, Offset: 8192, Length: 4096, Effect: EffectError}, read(v, 12288, 4096), nil},
		{"range to the end", Rule{Volume: v, Offset: 8192, Effect: EffectError}, read(v, 1<<40, 512), syscall.EIO},
		{"ranged rule skips fsync", Rule{Volume: v, Offset: 0, Length: 4096, Effect: EffectError}, fsync(v), nil},
		{"readonly fails writes", Rule{Volume: v, Effect: EffectReadOnly}, write(v, 0, 4096), syscall.EROFS},
		{"readonly fails discards", Rule{Volume: v, Effect: EffectReadOnly}, discard(v, 0, 4096), syscall.EROFS},
		{"readonly passes reads", Rule{Volume: v, Effect: EffectReadOnly}, read(v, 0, 4096), nil},
		{"readonly passes flushes", Rule{Volume: v, Effect: EffectReadOnly}, fsync(v), nil},
		{"lower-case errno", Rule{Volume: v, Effect: EffectError, Errno: "erofs"}, read(v, 0, 1), syscall.EROFS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inj, _ := newT(t, tc.rule)
			err := inj.Before(context.Background(), tc.io)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Before(%+v) = %v, want %v", tc.io, err, tc.want)
			}
			wantFaulted := int64(0)
			if tc.want != nil {
				wantFaulted = 1
			}
			if got := inj.Rules()[0].Faulted; got != wantFaulted {
				t.Fatalf("faulted %d, want %d", got, wantFaulted)
			}
		})
	}
}

func TestNoRulesLetsAllThrough(t *testing.T) {
	t.Parallel()
	inj, s := newT(t)
	if err := inj.Before(context.Background(), write("vol-1", 0, 1)); err != nil || len(s.asked) != 0 {
		t.Fatalf("Before = %v, slept %v", err, s.asked)
	}
}

// TestLatencyAddsUp: every matching latency rule adds its delay, asked once per I/O, before the deciding rule.
func TestLatencyAddsUp(t *testing.T) {
	t.Parallel()
	inj, s := newT(t,
		Rule{Volume: Any, Effect: EffectLatency, Latency: faults.Duration(20 * time.Millisecond)},
		Rule{Volume: "vol-1", Ops: []string{"read"}, Effect: EffectLatency, Latency: faults.Duration(5 * time.Millisecond)},
		Rule{Volume: "vol-1", Ops: []string{"read"}, Effect: EffectError},
	)
	ctx := context.Background()
	if err := inj.Before(ctx, read("vol-1", 0, 4096)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read: %v, want EIO after the latency", err)
	}
	if err := inj.Before(ctx, write("vol-1", 0, 4096)); err != nil {
		t.Fatalf("write: %v", err)
	}
	want := []time.Duration{25 * time.Millisecond, 20 * time.Millisecond}
	if len(s.asked) != 2 || s.asked[0] != want[0] || s.asked[1] != want[1] {
		t.Fatalf("slept %v, want %v", s.asked, want)
	}
	got := inj.Rules()
	if got[0].Faulted != 2 || got[1].Faulted != 1 || got[2].Faulted != 1 {
		t.Fatalf("counters %+v", got)
	}
}

// TestLatencyHonoursContext: a latency cut short by the filesystem closing fails the I/O.
func TestLatencyHonoursContext(t *testing.T) {
	t.Parallel()
	inj, _ := newT(t, Rule{Volume: Any, Effect: EffectLatency, Latency: faults.Duration(time.Minute)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inj.Before(ctx, read("vol-1", 0, 1)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Before after ctx end = %v, want EIO", err)
	}
	// The real sleep, too, returns at once on an ended context.
	real := New(Options{})
	if err := real.Set([]Rule{{Volume: Any, Effect: EffectLatency, Latency: faults.Duration(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	if err := real.Before(ctx, read("vol-1", 0, 1)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("real sleep after ctx end = %v, want EIO", err)
	}
}

func TestCount(t *testing.T) {
	t.Parallel()
	inj, _ := newT(t, Rule{Volume: "vol-1", Ops: []string{"read"}, Effect: EffectError, Count: 2})
	ctx := context.Background()
	var got []error
	for range 4 {
		got = append(got, inj.Before(ctx, read("vol-1", 0, 1)))
	}
	if !errors.Is(got[0], syscall.EIO) || !errors.Is(got[1], syscall.EIO) || got[2] != nil || got[3] != nil {
		t.Fatalf("results %v, want two EIOs then success", got)
	}
	st := inj.Rules()[0]
	if st.Faulted != 2 || st.Left == nil || *st.Left != 0 {
		t.Fatalf("status %+v", st)
	}
	// Non-matching I/O spends nothing.
	inj2, _ := newT(t, Rule{Volume: "vol-1", Ops: []string{"read"}, Effect: EffectError, Count: 1})
	_ = inj2.Before(ctx, write("vol-1", 0, 1))
	if err := inj2.Before(ctx, read("vol-1", 0, 1)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("counted rule spent by a write: %v", err)
	}
}

func TestProbability(t *testing.T) {
	t.Parallel()
	draws := []float64{0.1, 0.9, 0.29, 0.3}
	n := 0
	inj := New(Options{Float64: func() float64 { d := draws[n]; n++; return d }})
	if err := inj.Set([]Rule{{Volume: Any, Effect: EffectError, Probability: 0.3}}); err != nil {
		t.Fatal(err)
	}
	var failed []bool
	for range draws {
		failed = append(failed, inj.Before(context.Background(), read("vol-1", 0, 1)) != nil)
	}
	if want := []bool{true, false, true, false}; !equalBools(failed, want) {
		t.Fatalf("failed %v, want %v", failed, want)
	}
	// p=1 never draws.
	inj2 := New(Options{Float64: func() float64 { t.Fatal("drew for p=1"); return 0 }})
	_ = inj2.Set([]Rule{{Volume: Any, Effect: EffectError, Probability: 1}})
	if err := inj2.Before(context.Background(), read("vol-1", 0, 1)); err == nil {
		t.Fatal("p=1 let an I/O through")
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// waitHeld waits until the rule at index holds n I/Os (polling the counter the admin GET shows).
func waitHeld(t *testing.T, inj *Injector, index int, n int64) {
	t.Helper()
	for range 10000 {
		if inj.Rules()[index].Held == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("rule %d holds %d I/Os, want %d", index, inj.Rules()[index].Held, n)
}

// TestHangReleasedByReplacement: a hang holds I/Os until the rules change; the released I/Os ask the new rules.
func TestHangReleasedByReplacement(t *testing.T) {
	t.Parallel()
	inj, _ := newT(t, Rule{Volume: "vol-1", Effect: EffectHang})
	ctx := context.Background()
	done := make(chan error, 2)
	go func() { done <- inj.Before(ctx, read("vol-1", 0, 1)) }()
	go func() { done <- inj.Before(ctx, write("vol-1", 0, 1)) }()
	waitHeld(t, inj, 0, 2)
	if err := inj.Before(ctx, read("vol-2", 0, 1)); err != nil {
		t.Fatalf("another volume: %v", err)
	}
	// Replaced by a rule failing writes: the read goes through, the write fails.
	if err := inj.Set([]Rule{{Volume: "vol-1", Ops: []string{"write"}, Effect: EffectError}}); err != nil {
		t.Fatal(err)
	}
	var ok, failed int
	for range 2 {
		if err := <-done; err == nil {
			ok++
		} else if errors.Is(err, syscall.EIO) {
			failed++
		}
	}
	if ok != 1 || failed != 1 {
		t.Fatalf("released: %d through, %d failed; want 1 and 1", ok, failed)
	}
}

func TestHangReleasedByClearAndContext(t *testing.T) {
	t.Parallel()
	inj, _ := newT(t, Rule{Volume: Any, Effect: EffectHang})
	done := make(chan error, 1)
	go func() { done <- inj.Before(context.Background(), fsync("vol-1")) }()
	waitHeld(t, inj, 0, 1)
	inj.Clear()
	if err := <-done; err != nil {
		t.Fatalf("released by Clear: %v", err)
	}

	if err := inj.Set([]Rule{{Volume: Any, Effect: EffectHang}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- inj.Before(ctx, read("vol-1", 0, 1)) }()
	waitHeld(t, inj, 0, 1)
	cancel()
	if err := <-done; !errors.Is(err, syscall.EIO) {
		t.Fatalf("held I/O at ctx end: %v, want EIO", err)
	}
	if h := inj.Rules()[0].Held; h != 0 {
		t.Fatalf("still held: %d", h)
	}
}

func TestSetRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule Rule
	}{
		{"no volume", Rule{Effect: EffectError}},
		{"bad volume", Rule{Volume: "vol/../x", Effect: EffectError}},
		{"no effect", Rule{Volume: "vol-1"}},
		{"unknown effect", Rule{Volume: "vol-1", Effect: "melt"}},
		{"unknown op", Rule{Volume: "vol-1", Ops: []string{"trim"}, Effect: EffectError}},
		{"op twice", Rule{Volume: "vol-1", Ops: []string{"read", "read"}, Effect: EffectError}},
		{"readonly with ops", Rule{Volume: "vol-1", Ops: []string{"read"}, Effect: EffectReadOnly}},
		{"negative offset", Rule{Volume: "vol-1", Offset: -1, Effect: EffectError}},
		{"overflowing range", Rule{Volume: "vol-1", Offset: 1 << 62, Length: 1 << 62, Effect: EffectError}},
		{"ranged fsync", Rule{Volume: "vol-1", Ops: []string{"fsync"}, Length: 1, Effect: EffectError}},
		{"unknown errno", Rule{Volume: "vol-1", Effect: EffectError, Errno: "EWHAT"}},
		{"errno on hang", Rule{Volume: "vol-1", Effect: EffectHang, Errno: "EIO"}},
		{"latency without duration", Rule{Volume: "vol-1", Effect: EffectLatency}},
		{"latency too long", Rule{Volume: "vol-1", Effect: EffectLatency, Latency: faults.Duration(time.Hour)}},
		{"latency on error", Rule{Volume: "vol-1", Effect: EffectError, Latency: 1}},
		{"probability above 1", Rule{Volume: "vol-1", Effect: EffectError, Probability: 1.5}},
		{"negative count", Rule{Volume: "vol-1", Effect: EffectError, Count: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inj, _ := newT(t, Rule{Volume: "vol-keep", Effect: EffectError})
			err := inj.Set([]Rule{tc.rule})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Set(%+v) = %v, want ErrInvalid", tc.rule, err)
			}
			if r := inj.Rules(); len(r) != 1 || r[0].Volume != "vol-keep" {
				t.Fatalf("a refused set replaced the rules: %+v", r)
			}
		})
	}
	inj, _ := newT(t)
	if err := inj.Set(make([]Rule, MaxRules+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("too many rules: %v", err)
	}
}

// TestUnavailable: without the fuse backend, rules are refused with the reason; clearing them is fine.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	why := errors.New("I/O faults need --backend fuse")
	inj := New(Options{Unavailable: why})
	if err := inj.Set([]Rule{{Volume: Any, Effect: EffectError}}); !errors.Is(err, why) {
		t.Fatalf("Set = %v, want %v", err, why)
	}
	if err := inj.Set(nil); err != nil {
		t.Fatalf("Set(nil) = %v", err)
	}
}
