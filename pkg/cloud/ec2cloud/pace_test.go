package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/fakecloud/fakecloudtest"
	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// paceStep is one thing that happens to a bucketState at a time after the start: a call asks to go (grant),
// a call ends (finish), or a call is given back unsent.
type paceStep struct {
	at      time.Duration
	op      string     // "grant", "finish", "giveBack"
	ticket  ticketKind // finish, giveBack
	outcome outcome
	// grant: whether the call goes, on which ticket, or how long until it may.
	wantOK     bool
	wantTicket ticketKind
	wantWait   time.Duration
	// wantPaced is the state after the step.
	wantPaced bool
}

// grants returns n steps at at that each get a model token.
func grants(at time.Duration, n int) []paceStep {
	out := make([]paceStep, n)
	for i := range out {
		out[i] = paceStep{at: at, op: "grant", wantOK: true, wantTicket: ticketModel}
	}
	return out
}

func steps(parts ...[]paceStep) []paceStep { return slices.Concat(parts...) }

func one(s paceStep) []paceStep { return []paceStep{s} }

// probeRefusals is n probes at at, each refused before the next goes; paced is the state after the last.
func probeRefusals(at time.Duration, n int, paced bool) []paceStep {
	var out []paceStep
	for i := range n {
		out = append(out, paceStep{at: at, op: "grant", wantOK: true, wantTicket: ticketProbe},
			paceStep{at: at, op: "finish", ticket: ticketProbe, outcome: outcomeRefused, wantPaced: paced && i == n-1})
	}
	return out
}

func TestBucketState(t *testing.T) {
	lim := Limit{PerSecond: 5, Burst: 3} // a token every 200ms
	ms := time.Millisecond
	probe := func(at time.Duration, paced bool) paceStep {
		return paceStep{at: at, op: "grant", wantOK: true, wantTicket: ticketProbe, wantPaced: paced}
	}
	model := func(at time.Duration, paced bool) paceStep {
		return paceStep{at: at, op: "grant", wantOK: true, wantTicket: ticketModel, wantPaced: paced}
	}
	wait := func(at, d time.Duration, paced bool) paceStep {
		return paceStep{at: at, op: "grant", wantWait: d, wantPaced: paced}
	}
	end := func(at time.Duration, t ticketKind, o outcome, paced bool) paceStep {
		return paceStep{at: at, op: "finish", ticket: t, outcome: o, wantPaced: paced}
	}
	// toPace spends the full model and has refusalsToPace probes refused, which paces the action at 0.
	toPace := steps(grants(0, 3), probeRefusals(0, refusalsToPace, true))
	tests := []struct {
		name string
		// fresh starts from a new bucketState; the others from a model that has been calm long enough to be
		// full.
		fresh bool
		steps []paceStep
	}{
		{
			// A driver that just started does not know what the account's bucket holds.
			name: "a fresh model is empty: the first call is one probe, the next waits for a token", fresh: true,
			steps: steps(one(probe(0, false)), one(wait(0, 200*ms, false)), one(model(200*ms, false))),
		},
		{
			name: "a fresh model's probes widen as EC2 accepts them", fresh: true,
			steps: steps(one(probe(0, false)), one(end(10*ms, ticketProbe, outcomeAccepted, false)),
				// The accepted probe took the token the model was refilling: the next is a full token time away.
				one(probe(10*ms, false)), one(probe(10*ms, false)), one(wait(10*ms, 200*ms, false))),
		},
		{
			name: "the model's burst goes at once, then one probe, then the calls wait for the next token",
			steps: steps(grants(0, 3), one(probe(0, false)), one(wait(0, 200*ms, false)), one(wait(100*ms, 100*ms, false)),
				one(model(200*ms, false))),
		},
		{
			name: "accepted probes widen the window and take what the model had",
			steps: steps(grants(0, 3), one(probe(0, false)), one(end(0, ticketProbe, outcomeAccepted, false)),
				one(probe(0, false)), one(probe(0, false)),
				one(wait(0, 200*ms, false)),                           // the window of 2 is full, the model empty
				one(end(100*ms, ticketProbe, outcomeAccepted, false)), // 0.5 - 1: still empty, not in debt
				one(probe(100*ms, false)), one(probe(100*ms, false)), one(wait(100*ms, 200*ms, false)), one(model(300*ms, false))),
		},
		{
			name: "refused calls in a row pace the action: no probe goes, calls wait for the model's tokens",
			steps: steps(toPace, one(wait(0, 200*ms, true)), one(wait(100*ms, 100*ms, true)), one(model(200*ms, true)),
				one(wait(200*ms, 200*ms, true))),
		},
		{
			name:  "one call short of the run, calls still go beyond the model",
			steps: steps(grants(0, 3), probeRefusals(0, refusalsToPace-1, false), one(probe(0, false))),
		},
		{
			name: "an accepted call breaks the run",
			steps: steps(grants(0, 3), probeRefusals(0, refusalsToPace-1, false), one(probe(0, false)),
				one(end(0, ticketProbe, outcomeAccepted, false)), probeRefusals(0, refusalsToPace-1, false),
				one(probe(0, false))),
		},
		{
			name: "a refused model call empties the model (its token is not given back) and halves its rate",
			steps: steps(grants(0, 3), one(end(0, ticketModel, outcomeRefused, false)),
				one(probe(0, false)), one(wait(0, 400*ms, false))),
		},
		{
			name: "paced, a refused model call halves the rate, and no probe goes",
			steps: steps(toPace, one(model(200*ms, true)), one(end(200*ms, ticketModel, outcomeRefused, true)),
				one(wait(200*ms, 400*ms, true)), one(model(600*ms, true))),
		},
		{
			name: "a full model ends the paced spell, and probes go again",
			steps: steps(toPace,
				one(model(599*ms, true)), // 2.995 tokens: not full
				one(model(1200*ms, false)), grants(1200*ms, 2), one(probe(1200*ms, false)), one(wait(1200*ms, 200*ms, false))),
		},
		{
			name: "calls given back unsent return their token or probe slot",
			steps: steps(grants(0, 3), one(probe(0, false)),
				one(paceStep{op: "giveBack", ticket: ticketProbe}), one(paceStep{op: "giveBack", ticket: ticketModel}),
				one(model(0, false)), one(probe(0, false))),
		},
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newBucketState(lim, start)
			if !tt.fresh {
				s.tokens = float64(lim.Burst)
			}
			for i, st := range tt.steps {
				now := start.Add(st.at)
				switch st.op {
				case "grant":
					tk, ok, wait := s.grant(now)
					if ok != st.wantOK || ok && tk.kind != st.wantTicket || !ok && wait != st.wantWait {
						t.Fatalf("step %d (grant at %v): got ok=%v ticket=%v wait=%v, want ok=%v ticket=%v wait=%v (state %+v)",
							i, st.at, ok, tk.kind, wait, st.wantOK, st.wantTicket, st.wantWait, *s)
					}
				case "finish":
					s.finish(now, ticket{kind: st.ticket, probes: s.probesGranted}, st.outcome)
				case "giveBack":
					s.giveBack(ticket{kind: st.ticket})
				default:
					t.Fatalf("step %d: unknown op %q", i, st.op)
				}
				if s.throttled() != st.wantPaced {
					t.Fatalf("step %d (%s at %v): paced %v, want %v (state %+v)", i, st.op, st.at, s.throttled(), st.wantPaced, *s)
				}
			}
		})
	}
}

// TestModelRateFollowsRefusals: model calls EC2 refuses (no probe out to have taken EC2's token) cut the
// model's refill rate by half, at most once per token time; accepted calls grow it back, never past the
// limit; the model refills at the rate it has, throttled or not.
func TestModelRateFollowsRefusals(t *testing.T) {
	lim := Limit{PerSecond: 8, Burst: 100}
	ms := time.Millisecond
	type call struct {
		at      time.Duration
		outcome outcome
	}
	refused := func(at time.Duration) call { return call{at, outcomeRefused} }
	accepted := func(at time.Duration, n int) []call {
		out := make([]call, n)
		for i := range out {
			out[i] = call{at, outcomeAccepted}
		}
		return out
	}
	tests := []struct {
		name string
		// unpaced: the action is not paced (the tests' default is a paced one).
		unpaced bool
		// probeOut: a probe was out when each call went, and may have taken EC2's token.
		probeOut bool
		calls    []call
		want     float64
		// wantTokens, after refilling to the last call's time plus refillFor.
		refillFor  time.Duration
		wantTokens float64
	}{
		{name: "one refusal halves the rate", calls: []call{refused(0)}, want: 4, refillFor: 500 * ms, wantTokens: 2},
		{name: "refusals within one token time cut once", calls: []call{refused(0), refused(100 * ms)}, want: 4},
		{name: "refusals a token time apart cut again", calls: []call{refused(0), refused(250 * ms), refused(750 * ms)}, want: 1,
			refillFor: time.Second, wantTokens: 1},
		{name: "the rate never falls below its floor",
			calls: []call{refused(0), refused(time.Second), refused(3 * time.Second), refused(6 * time.Second), refused(12 * time.Second),
				refused(24 * time.Second), refused(48 * time.Second), refused(96 * time.Second), refused(200 * time.Second)},
			want: 8.0 / 8},
		{name: "accepted calls grow it back", calls: append([]call{refused(0)}, accepted(time.Second, 22)...), want: 4 * math.Pow(1+rateGrowth, 22)},
		{name: "never past the limit", calls: append([]call{refused(0)}, accepted(time.Second, 80)...), want: 8},
		{name: "unpaced too", unpaced: true, calls: []call{refused(0)}, want: 4, refillFor: 500 * ms, wantTokens: 2},
		{name: "a refusal that may be a probe's doing cuts nothing", probeOut: true, calls: []call{refused(0)}, want: 8},
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newBucketState(lim, start)
			s.paced = !tt.unpaced
			var last time.Duration
			for _, c := range tt.calls {
				now := start.Add(c.at)
				s.finish(now, ticket{kind: ticketModel, probes: s.probesGranted, probesOut: tt.probeOut}, c.outcome)
				last = c.at
			}
			if math.Abs(s.rate-tt.want) > 1e-9 {
				t.Errorf("rate %v, want %v", s.rate, tt.want)
			}
			if tt.refillFor > 0 {
				s.refill(start.Add(last + tt.refillFor))
				if math.Abs(s.tokens-tt.wantTokens) > 1e-9 {
					t.Errorf("%v after the last call: %v tokens, want %v", tt.refillFor, s.tokens, tt.wantTokens)
				}
			}
		})
	}
}

func TestLimitOf(t *testing.T) {
	limits := DefaultRequestLimits()
	tests := []struct {
		action string
		want   Limit
	}{
		{"CreateVolume", Limit{PerSecond: 5, Burst: 100}},
		{"DeleteVolume", Limit{PerSecond: 5, Burst: 100}},
		{"CreateTags", Limit{PerSecond: 10, Burst: 100}},
		{"AttachVolume", Limit{PerSecond: 5, Burst: 50}},
		{"ModifyVolume", Limit{PerSecond: 5, Burst: 50}},
		{"DescribeVolumes", Limit{PerSecond: 20, Burst: 100}},
		{"DescribeInstances", Limit{PerSecond: 20, Burst: 100}},
	}
	for _, tt := range tests {
		if got, ok := limitOf(limits, tt.action); !ok || got != tt.want {
			t.Errorf("limitOf(%s) = %+v, %v; want %+v", tt.action, got, ok, tt.want)
		}
	}
	if _, ok := limitOf(map[string]Limit{"CreateVolume": {PerSecond: 1, Burst: 1}}, "AttachVolume"); ok {
		t.Error("an action no entry covers has a limit")
	}
}

func TestOutcomeOf(t *testing.T) {
	tests := []struct {
		err  error
		want outcome
	}{
		{nil, outcomeAccepted},
		{&smithy.GenericAPIError{Code: "RequestLimitExceeded"}, outcomeRefused},
		{&smithy.GenericAPIError{Code: "Throttling"}, outcomeRefused},
		{&smithy.GenericAPIError{Code: "IncorrectState"}, outcomeAccepted},
		{errors.New("connection reset"), outcomeUnknown},
		{context.DeadlineExceeded, outcomeUnknown},
	}
	for _, tt := range tests {
		if got := outcomeOf(tt.err); got != tt.want {
			t.Errorf("outcomeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// fakeClock runs timers when advanced.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// advance moves the clock on by d and runs the timers due, in order, outside the clock's lock.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	kept := c.timers[:0]
	for _, tm := range c.timers {
		switch {
		case tm.stopped:
		case !tm.at.After(c.now):
			due = append(due, tm)
		default:
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, tm := range due {
		tm.f()
	}
}

// queued waits until n calls wait in b's queue: synchronization with the goroutines, not a timing check.
func queued(t *testing.T, b *bucket, n int) {
	t.Helper()
	for range 100000 {
		b.mu.Lock()
		l := len(b.queue)
		b.mu.Unlock()
		if l == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("%d calls never came to wait", n)
}

// TestBucketQueue: calls that find no room wait in order of arrival and go as tokens come; a call whose
// context ends leaves the queue without taking anyone's turn or a token.
func TestBucketQueue(t *testing.T) {
	tests := []struct {
		name    string
		waiters int
		cancel  []int // waiters whose context ends before the clock moves
		// advances of 200ms (a token each), and the waiters that must have gone by then, in order.
		advances int
		want     []int
	}{
		{name: "in order of arrival", waiters: 3, advances: 3, want: []int{0, 1, 2}},
		{name: "a caller that gives up leaves its turn to the next", waiters: 4, cancel: []int{1}, advances: 3, want: []int{0, 2, 3}},
		{name: "no more calls go than tokens come", waiters: 4, advances: 2, want: []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			s := newBucketState(Limit{PerSecond: 5, Burst: 2}, clk.Now())
			// Empty and paced: calls go on the model's tokens alone.
			s.tokens, s.paced = 0, true
			b := &bucket{action: "AttachVolume", clock: clk, onChange: func(string, Limit, bool) {}, s: s}
			var (
				mu   sync.Mutex
				went []int
				wg   sync.WaitGroup
			)
			gone := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(went)
			}
			cancels := map[int]context.CancelFunc{}
			for i := range tt.waiters {
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(cancel)
				cancels[i] = cancel
				wg.Go(func() {
					if _, err := b.acquire(ctx); err != nil {
						return
					}
					mu.Lock()
					went = append(went, i)
					mu.Unlock()
				})
				queued(t, b, i+1)
			}
			for _, i := range tt.cancel {
				cancels[i]()
			}
			queued(t, b, tt.waiters-len(tt.cancel))
			for k := range tt.advances {
				clk.advance(200 * time.Millisecond)
				// Wait for the call let go to say so before the next token comes.
				for n := 0; gone() < min(k+1, len(tt.want)); n++ {
					if n > 1000000 {
						t.Fatalf("no call went after advance %d", k+1)
					}
					runtime.Gosched()
				}
			}
			for i := range tt.waiters {
				cancels[i]()
			}
			wg.Wait()
			if fmt.Sprint(went) != fmt.Sprint(tt.want) {
				t.Errorf("calls went in order %v, want %v", went, tt.want)
			}
			if b.s.tokens > 0.001 {
				t.Errorf("model holds %v tokens after every token went to a call", b.s.tokens)
			}
		})
	}
}

// TestPacedBurstUnderBuckets: a burst of attaches and detaches against buckets like EC2's (faster, to keep
// the test short) all succeed, and the pacer keeps EC2's refusals to a small share of the calls (with
// Pace.Off, three in four attempts are refused and some attaches fail after their ten attempts). So it does
// when the account's buckets refill 5 times slower than the pacer assumes (another client spends them, or
// the limits given are wrong): the model learns the slower rate.
func TestPacedBurstUnderBuckets(t *testing.T) {
	tests := []struct {
		name   string
		model  Limit
		bucket faults.Limit
		// maxRefused is the share of each action's calls EC2 may refuse. (A model that never learns has three
		// in four refused against a bucket 5 times smaller, and a quarter of the attaches fail.)
		maxRefused float64
	}{
		{name: "model as the bucket", model: Limit{PerSecond: 50, Burst: 10}, bucket: faults.Limit{RequestsPerSecond: 50, Burst: 10}, maxRefused: 0.5},
		{name: "model 5 times the bucket", model: Limit{PerSecond: 50, Burst: 10}, bucket: faults.Limit{RequestsPerSecond: 10, Burst: 10}, maxRefused: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { pacedBurst(t, tt.model, tt.bucket, tt.maxRefused) })
	}
}

func pacedBurst(t *testing.T, model Limit, bucket faults.Limit, maxRefused float64) {
	fl := map[string]faults.Limit{"AttachVolume": bucket, "DetachVolume": bucket}
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(40), Faults: faults.Config{ActionRateLimits: fl}}, func(o *Options) {
		o.Pace.Limits = map[string]Limit{"AttachVolume": model, "DetachVolume": model}
		o.Retry = RetryOptions{}
	})
	const n = 60
	var ids []string
	for _, name := range names("pvc-paced", n) {
		d, err := e.CreateDisk(testCtx(t), name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	instances := []string{"i-0a000000000000001", "i-0a000000000000002"}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			inst := instances[i%2]
			if _, err := e.AttachDisk(ctxTimeout(t, time.Minute), id, inst); err != nil {
				t.Errorf("attach %s: %v", id, err)
				return
			}
			if err := e.DetachDisk(ctxTimeout(t, time.Minute), id, inst); err != nil {
				t.Errorf("detach %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	calls := e.calls(t)
	for _, action := range []string{"AttachVolume", "DetachVolume"} {
		if refused, all := calls[action+"/RequestLimitExceeded"], calls[action]; refused > all*maxRefused {
			t.Errorf("%s: %v of %v calls refused; want at most %.0f %%", action, refused, all, 100*maxRefused)
		}
	}
	t.Logf("calls: %v", calls)
}

// TestRandomRefusalsAreRetried: when EC2 refuses 30 % of all calls at random, every operation still
// succeeds, with the default retry settings.
func TestRandomRefusalsAreRetried(t *testing.T) {
	refuse := faults.ErrorFault{Rate: 0.3, Code: "RequestLimitExceeded", Before: true}
	e := newTestEnv(t, fakecloudtest.Options{Cloud: sameZoneCloud(40), Faults: faults.Config{Errors: map[string]faults.ErrorFault{faults.AllActions: refuse}}},
		func(o *Options) { o.Retry = RetryOptions{} })
	var wg sync.WaitGroup
	for i, name := range names("pvc-noise", 20) {
		wg.Go(func() {
			ctx := ctxTimeout(t, time.Minute)
			inst := []string{"i-0a000000000000001", "i-0a000000000000002"}[i%2]
			d, err := e.CreateDisk(ctx, name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1})
			if err == nil {
				_, err = e.AttachDisk(ctx, d.ID, inst)
			}
			if err == nil {
				err = e.DetachDisk(ctx, d.ID, inst)
			}
			if err == nil {
				err = e.DeleteDisk(ctx, d.ID)
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	wg.Wait()
	if calls := e.calls(t); calls["CreateVolume/RequestLimitExceeded"] == 0 {
		t.Errorf("no call was refused; the test proves nothing: %v", calls)
	}
}

// TestRestartedDriverStartsEmpty: a driver that starts while the account's bucket is empty (the driver before
// it, killed mid-burst, spent it) does not send a burst's worth of calls that EC2 refuses: its model starts
// empty and it probes one call at a time. (A model that starts full sends as many calls as its burst at
// once, and nearly all are refused: 30 refused calls for 20 creates.)
func TestRestartedDriverStartsEmpty(t *testing.T) {
	const burst = 20
	lim := Limit{PerSecond: 8, Burst: burst}
	e := newTestEnv(t, fakecloudtest.Options{Faults: faults.Config{ActionRateLimits: map[string]faults.Limit{
		"CreateVolume": {RequestsPerSecond: lim.PerSecond, Burst: lim.Burst}}}}, func(o *Options) {
		o.Pace.Limits = map[string]Limit{"CreateVolume": lim}
		o.Retry = RetryOptions{}
	})
	createAll := func(c *Cloud, prefix string) {
		var wg sync.WaitGroup
		for _, name := range names(prefix, burst) {
			wg.Go(func() {
				if _, err := c.CreateDisk(ctxTimeout(t, time.Minute), name, cloud.DiskOptions{Zone: zoneA, SizeGiB: 1}); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			})
		}
		wg.Wait()
	}
	// The first driver spends the bucket.
	createAll(e.Cloud, "pvc-first")
	// A second driver, started at once, on the same account.
	reg := prometheus.NewRegistry()
	o := fastOptions(e.fc, reg)
	o.Pace.Limits, o.Retry = map[string]Limit{"CreateVolume": lim}, RetryOptions{}
	next, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	createAll(next, "pvc-second")
	restarted := &testEnv{Cloud: next, fc: e.fc, reg: reg}
	calls := restarted.calls(t)
	if refused := calls["CreateVolume/RequestLimitExceeded"]; refused >= burst {
		t.Errorf("the restarted driver had %v of %v CreateVolume calls refused; want fewer than a burst (%d)", refused, calls["CreateVolume"], burst)
	}
	t.Logf("restarted driver's calls: %v", calls)
}

// TestPollSpacingFollowsItsActions: while one action runs at its bucket's refill rate, only the batchers
// whose waits follow its calls space their polls; the others poll at once.
func TestPollSpacingFollowsItsActions(t *testing.T) {
	tests := []struct {
		paced string
		// want is the spacing of each batcher, by resource.
		want map[string]time.Duration
	}{
		{paced: "", want: map[string]time.Duration{"volumes": 0, "modifications": 0, "snapshots": 0, "instances": 0}},
		{paced: "AttachVolume", want: map[string]time.Duration{"volumes": time.Second, "modifications": 0, "snapshots": 0, "instances": 0}},
		{paced: "CreateSnapshot", want: map[string]time.Duration{"volumes": 0, "modifications": 0, "snapshots": time.Second, "instances": 0}},
		{paced: "DescribeInstances", want: map[string]time.Duration{"volumes": 0, "modifications": 0, "snapshots": 0, "instances": time.Second}},
	}
	for _, tt := range tests {
		t.Run("paced "+tt.paced, func(t *testing.T) {
			e := newTestEnv(t, fakecloudtest.Options{})
			if tt.paced != "" {
				b := e.pacer.bucketFor(tt.paced)
				b.mu.Lock()
				b.s.paced = true
				b.mu.Unlock()
			}
			got := map[string]time.Duration{"volumes": e.volumes.spacing(), "modifications": e.modifications.spacing(),
				"snapshots": e.snapshots.spacing(), "instances": e.instances.spacing()}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("spacing %v, want %v", got, tt.want)
			}
		})
	}
}
