package ec2cloud

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go/middleware"
	"k8s.io/klog/v2"
)

// Limit is one of EC2's request-token buckets: Burst tokens, refilled at PerSecond.
type Limit struct {
	PerSecond float64
	Burst     int
}

// Keys of DefaultRequestLimits besides action names: every Describe action, and every other action.
const (
	limitDescribe = "Describe*"
	limitOther    = "*"
)

// DefaultRequestLimits are EC2's default request-token buckets per account and region, as AWS documents them
// ("Request throttling for the Amazon EC2 API"), keyed by action, limitDescribe for the Describe actions and
// limitOther for every other (mutating) one. A new map each time: callers may change theirs.
func DefaultRequestLimits() map[string]Limit {
	return map[string]Limit{
		"CreateVolume":   {PerSecond: 5, Burst: 100},
		"DeleteVolume":   {PerSecond: 5, Burst: 100},
		"CreateSnapshot": {PerSecond: 5, Burst: 100},
		"DeleteSnapshot": {PerSecond: 5, Burst: 100},
		"CreateTags":     {PerSecond: 10, Burst: 100},
		"DeleteTags":     {PerSecond: 10, Burst: 100},
		limitDescribe:    {PerSecond: 20, Burst: 100},
		limitOther:       {PerSecond: 5, Burst: 50},
	}
}

// PaceOptions shape the pacing of EC2 calls (see "Pacing" in doc.go). Zero fields take the defaults.
type PaceOptions struct {
	// Off sends every call at once, as the SDK alone would.
	Off bool
	// Limits are the buckets the pacer assumes, keyed as DefaultRequestLimits; nil takes those.
	Limits map[string]Limit
	// PollInterval spaces the batched Describe calls of a batcher while an action whose waits it serves runs
	// at its bucket's refill rate. Default 1s.
	PollInterval time.Duration
}

func (o PaceOptions) withDefaults() PaceOptions {
	if o.Limits == nil {
		o.Limits = DefaultRequestLimits()
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return o
}

// limitOf is the bucket of action under limits.
func limitOf(limits map[string]Limit, action string) (Limit, bool) {
	if l, ok := limits[action]; ok {
		return l, true
	}
	if strings.HasPrefix(action, "Describe") {
		if l, ok := limits[limitDescribe]; ok {
			return l, true
		}
	}
	l, ok := limits[limitOther]
	return l, ok
}

// Tuning of the pacer; see "Pacing" in doc.go.
const (
	// initialWindow is how many calls beyond the model may be in flight at first, and again after a paced
	// spell.
	initialWindow = 1
	// maxWindow bounds the calls beyond the model in flight, and so the calls EC2 refuses at once when its
	// bucket runs dry under a burst. Four in flight let scores of calls a second go at EC2's round trips,
	// far beyond any default bucket's refill.
	maxWindow = 8
	// refusalsToPace refused calls in a row show the account's bucket empty: random refusals of 30 % of all
	// calls make such a run about once in 170,000 calls, while a bucket run dry refuses every call beyond
	// its refill, so the run costs little more than the window of calls already in flight.
	refusalsToPace = 10
	// rateCut is what a refused model call leaves of the model's refill rate: EC2
	// had no token where the model had one, so the account's bucket refills slower than the model (another
	// client spends it too, or its limits are lower). Halving finds a bucket 5 times smaller in three cuts.
	rateCut = 0.5
	// rateGrowth is how much each accepted call grows the rate back, up to the limit: a halved rate is whole
	// again after 45 accepted calls.
	rateGrowth = 1.0 / 64
	// minRateShare bounds the cuts: the rate stays at least this share of the limit's, which bounds how long
	// random refusals that cut it can hold a paced spell (the model fills at this share of its refill).
	minRateShare = 1.0 / 8
)

// ticketKind is how a call was let through: on a token of the model, or as a probe beyond it.
type ticketKind int

const (
	ticketModel ticketKind = iota
	ticketProbe
)

// ticket is a call's leave to go. For a model call, probes is the number of probes granted before it and
// probesOut whether any was in flight, to tell a call that may have met EC2 after a probe (see finish).
type ticket struct {
	kind      ticketKind
	probes    uint64
	probesOut bool
}

// outcome is what EC2 made of a call.
type outcome int

const (
	// outcomeAccepted: EC2 answered other than throttled (the call spent a token, whatever it answered).
	outcomeAccepted outcome = iota
	// outcomeRefused: EC2 throttled the call; it spent no token.
	outcomeRefused
	// outcomeUnknown: no answer (network error, the caller gave up): the call may or may not have spent one.
	outcomeUnknown
)

// bucketState is one action's limiter: a model of the account's bucket that decides which calls go. It holds
// no lock and reads no clock: bucket does both, and tests drive it with times of their own.
type bucketState struct {
	limit Limit
	// tokens are the model's, refilled at rate to at. rate is limit.PerSecond at most, cut when EC2 refuses
	// model calls (at most once a token time: lastCut) and grown back as it accepts calls.
	tokens  float64
	at      time.Time
	rate    float64
	lastCut time.Time
	// paced: refusalsToPace calls in a row were refused, so the account's bucket is empty and calls wait for
	// the model's tokens; no call goes beyond it until the model is full again.
	paced bool
	// refusedRun counts the calls refused since EC2 last accepted one.
	refusedRun int
	// window is how many probes may be in flight while not paced; probesGranted counts the probes let go,
	// and probesDone those that have ended (the difference is in flight).
	window                    int
	probesGranted, probesDone uint64
}

// newBucketState starts the model empty: a driver that just started does not know what the account's bucket
// holds (a driver before it, or another client, may have emptied it), so its first calls go as probes, one at
// first, more as EC2 accepts them.
func newBucketState(l Limit, now time.Time) *bucketState {
	return &bucketState{limit: l, at: now, rate: l.PerSecond, window: initialWindow}
}

// tokenTime is how long the model takes to refill one token at its rate (0 when it has none).
func (s *bucketState) tokenTime() time.Duration {
	if s.rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / s.rate)
}

// cutRate halves the model's rate, once per token time: the calls one token time let through met the same
// bucket, as TCP cuts its window once per round trip.
func (s *bucketState) cutRate(now time.Time) {
	if !s.lastCut.IsZero() && now.Sub(s.lastCut) < s.tokenTime() {
		return
	}
	s.rate = max(s.rate*rateCut, s.limit.PerSecond*minRateShare)
	s.lastCut = now
}

// growRate gives a share of the rate back for a call EC2 accepted.
func (s *bucketState) growRate() { s.rate = min(s.rate*(1+rateGrowth), s.limit.PerSecond) }

// refill brings the model to now. A full model ends a paced spell: the action has been calm for as long as
// EC2 takes to refill its bucket, so probing starts again from the initial window.
func (s *bucketState) refill(now time.Time) {
	if now.After(s.at) {
		s.tokens += s.rate * now.Sub(s.at).Seconds()
		s.at = now
	}
	if s.tokens < float64(s.limit.Burst) {
		return
	}
	s.tokens = float64(s.limit.Burst)
	if s.paced {
		s.paced, s.refusedRun, s.window = false, 0, initialWindow
	}
}

// probesInFlight counts the probes let go that have not ended.
func (s *bucketState) probesInFlight() int { return int(s.probesGranted - s.probesDone) }

// grant lets one call go if it may: on a token of the model, else, unless paced, as a probe when the window
// has room. Otherwise wait is how long until the model has a token (0: only a call's end can let one go).
func (s *bucketState) grant(now time.Time) (t ticket, ok bool, wait time.Duration) {
	s.refill(now)
	if s.tokens >= 1 {
		s.tokens--
		return ticket{kind: ticketModel, probes: s.probesGranted, probesOut: s.probesInFlight() > 0}, true, 0
	}
	if !s.paced && s.probesInFlight() < s.window {
		s.probesGranted++
		return ticket{kind: ticketProbe}, true, 0
	}
	if s.rate > 0 {
		wait = time.Duration(math.Ceil((1 - s.tokens) / s.rate * float64(time.Second)))
	}
	return ticket{}, false, wait
}

// giveBack returns the ticket of a call that was never sent.
func (s *bucketState) giveBack(t ticket) {
	if t.kind == ticketProbe {
		s.probesDone++
		return
	}
	s.tokens = min(s.tokens+1, float64(s.limit.Burst))
}

// finish records what EC2 made of a call let through on t. It reports whether the action became paced.
func (s *bucketState) finish(now time.Time, t ticket, o outcome) (pacedNow bool) {
	s.refill(now)
	// A model call that may have met EC2 after a probe (one was out when it went, went since, or is out
	// still) may have been refused because the probe took EC2's token.
	raced := t.kind == ticketModel && (t.probesOut || s.probesGranted != t.probes || s.probesInFlight() > 0)
	if t.kind == ticketProbe {
		s.probesDone++
	}
	switch o {
	case outcomeAccepted:
		s.refusedRun = 0
		s.growRate()
		if t.kind == ticketProbe {
			// EC2 had a token the model did not, and has one less now: it is no emptier than the model at 0.
			s.tokens = max(s.tokens-1, 0)
			if !s.paced {
				s.window = min(s.window+1, maxWindow)
			}
		}
	case outcomeRefused:
		s.refusedRun++
		// EC2 had less than a token: the model is as empty as EC2's bucket. Were the refused call's token
		// given back, the next call would go at once and be refused in turn until EC2 caught up.
		s.tokens = min(s.tokens, 0)
		// A model call refused that no probe raced shows the bucket refilling slower than the model.
		if t.kind == ticketModel && !raced {
			s.cutRate(now)
		}
		if !s.paced && s.refusedRun >= refusalsToPace {
			s.paced, s.window = true, initialWindow
			return true
		}
	}
	return false
}

// throttled reports whether the action is paced: EC2 showed its bucket empty, and calls wait for the model.
func (s *bucketState) throttled() bool { return s.paced }

// clock is time for the pacer; tests drive a fake one.
type clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// bucket is one action's bucketState with the calls waiting on it, served in order of arrival.
type bucket struct {
	action string
	clock  clock
	// onChange is told (holding mu) when the action becomes throttled or calm again.
	onChange func(action string, l Limit, throttled bool)

	mu    sync.Mutex
	s     *bucketState
	queue []*waiter
	// stopTimer stops the pending dispatch, if any; timerAt is when it fires.
	stopTimer func() bool
	timerAt   time.Time
}

type waiter struct{ granted chan ticket }

// acquire waits for the call's turn and returns its ticket, or ctx's error if ctx ends first.
func (b *bucket) acquire(ctx context.Context) (ticket, error) {
	b.mu.Lock()
	if len(b.queue) == 0 {
		if t, ok, _ := b.grantLocked(); ok {
			b.mu.Unlock()
			return t, nil
		}
	}
	w := &waiter{granted: make(chan ticket, 1)}
	b.queue = append(b.queue, w)
	b.dispatchLocked()
	b.mu.Unlock()
	select {
	case t := <-w.granted:
		return t, nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case t := <-w.granted:
			b.s.giveBack(t)
		default:
			for i, q := range b.queue {
				if q == w {
					b.queue = append(b.queue[:i], b.queue[i+1:]...)
					break
				}
			}
		}
		b.dispatchLocked()
		return ticket{}, ctx.Err()
	}
}

// finish records a call's outcome and lets waiting calls go if that made room.
func (b *bucket) finish(t ticket, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasThrottled := b.s.throttled()
	if b.s.finish(b.clock.Now(), t, o) {
		b.onChange(b.action, b.s.limit, true)
	} else if wasThrottled && !b.s.throttled() {
		b.onChange(b.action, b.s.limit, false)
	}
	b.dispatchLocked()
}

// grantLocked is grant, telling onChange when a full model ended the paced spell. Caller holds b.mu.
func (b *bucket) grantLocked() (ticket, bool, time.Duration) {
	wasThrottled := b.s.throttled()
	t, ok, wait := b.s.grant(b.clock.Now())
	if wasThrottled && !b.s.throttled() {
		b.onChange(b.action, b.s.limit, false)
	}
	return t, ok, wait
}

// dispatchLocked lets the waiting calls go in order while the state allows, then sets a timer for when it
// may allow the next. Caller holds b.mu.
func (b *bucket) dispatchLocked() {
	for len(b.queue) > 0 {
		t, ok, wait := b.grantLocked()
		if !ok {
			if wait > 0 {
				b.armLocked(wait)
			}
			return
		}
		w := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		w.granted <- t
	}
}

// armLocked makes sure a dispatch runs within d.
func (b *bucket) armLocked(d time.Duration) {
	at := b.clock.Now().Add(d)
	if b.stopTimer != nil && !b.timerAt.After(at) {
		return
	}
	if b.stopTimer != nil {
		b.stopTimer()
	}
	b.timerAt = at
	b.stopTimer = b.clock.AfterFunc(d, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.stopTimer = nil
		b.dispatchLocked()
	})
}

// pacer paces calls per action (see "Pacing" in doc.go). Its zero value is not usable: newPacer.
type pacer struct {
	opts    PaceOptions
	clock   clock
	metrics *metrics

	mu      sync.Mutex
	buckets map[string]*bucket
}

func newPacer(o PaceOptions, c clock, m *metrics) *pacer {
	return &pacer{opts: o.withDefaults(), clock: c, metrics: m, buckets: map[string]*bucket{}}
}

// bucketFor returns action's bucket, made on first use, or nil when it has no limit.
func (p *pacer) bucketFor(action string) *bucket {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.buckets[action]; ok {
		return b
	}
	l, ok := limitOf(p.opts.Limits, action)
	if !ok || l.Burst <= 0 {
		p.buckets[action] = nil
		return nil
	}
	b := &bucket{action: action, clock: p.clock, onChange: logThrottling, s: newBucketState(l, p.clock.Now())}
	p.buckets[action] = b
	return b
}

// logThrottling tells, at the default verbosity, when EC2 starts or stops throttling an action: once per
// paced spell, not per call.
func logThrottling(action string, l Limit, throttled bool) {
	if throttled {
		klog.InfoS("EC2 throttles an action; pacing its calls to its request bucket", "action", action,
			"perSecond", l.PerSecond, "burst", l.Burst)
		return
	}
	klog.InfoS("EC2 no longer throttles an action", "action", action)
}

// pollSpacing is the least time between two batched Describe calls of a batcher whose waits follow calls of
// actions: PollInterval while one of them runs at its bucket's refill rate (the calls the polls would let go
// next wait for tokens anyway), else 0. Other batchers poll as they would.
func (p *pacer) pollSpacing(actions ...string) time.Duration {
	for _, action := range actions {
		p.mu.Lock()
		b := p.buckets[action]
		p.mu.Unlock()
		if b == nil {
			continue
		}
		b.mu.Lock()
		paced := b.s.throttled()
		b.mu.Unlock()
		if paced {
			return p.opts.PollInterval
		}
	}
	return 0
}

// addMiddleware is an SDK APIOptions entry: every attempt (the pacer sits inside the retry loop) waits its
// turn.
func (p *pacer) addMiddleware(stack *middleware.Stack) error {
	mw := middleware.FinalizeMiddlewareFunc("DiskforgePacer", p.handle)
	if _, ok := stack.Finalize.Get("Retry"); ok {
		return stack.Finalize.Insert(mw, "Retry", middleware.After)
	}
	return stack.Finalize.Add(mw, middleware.After)
}

func (p *pacer) handle(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	action := middleware.GetOperationName(ctx)
	b := p.bucketFor(action)
	if b == nil {
		return next.HandleFinalize(ctx, in)
	}
	start := p.clock.Now()
	t, err := b.acquire(ctx)
	if p.metrics != nil {
		p.metrics.paced.WithLabelValues(action).Observe(p.clock.Now().Sub(start).Seconds())
	}
	if err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, err
	}
	out, md, err := next.HandleFinalize(ctx, in)
	b.finish(t, outcomeOf(err))
	return out, md, err
}

// isThrottleCode reports a code the SDK's retryer takes for throttling.
func isThrottleCode(code string) bool {
	_, ok := retry.DefaultThrottleErrorCodes[code]
	return ok
}

// outcomeOf judges an attempt's error by its code, throttling as the SDK's retryer knows it, so both agree.
func outcomeOf(err error) outcome {
	code := errorCode(err)
	switch {
	case err == nil:
		return outcomeAccepted
	case isThrottleCode(code):
		return outcomeRefused
	case code != "":
		return outcomeAccepted
	}
	return outcomeUnknown
}
