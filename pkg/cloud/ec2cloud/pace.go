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

// Tuning of the pacer's judgement; see doc.go.
const (
	// initialWindow is how many calls beyond the model may be in flight before any has been answered.
	initialWindow = 1
	// maxWindow bounds the calls beyond the model in flight, and so the calls EC2 refuses at once when its
	// bucket runs dry under a burst. Sixteen in flight let several hundred calls a second go at EC2's round
	// trips, far beyond any default bucket's refill.
	maxWindow = 16
	// evidence: a run of refused probes shows the bucket empty once random refusals at the rate seen on
	// model calls would make such a run this unlikely: with none seen yet (noisePrior), six refusals; with
	// 32 seen and none refused, two; with 30 % of them refused, six.
	evidence = 0.001
	// maxRefusedProbes refused probes in a row are evidence however many model calls EC2 refuses: a third
	// refused at random needs six.
	maxRefusedProbes = 6
	// noiseSamples is how many recent model calls the refusal rate is read from.
	noiseSamples = 32
	// calmProbes probes accepted in a row end a throttled episode: EC2 let that many calls through beyond
	// the model, so its bucket is fuller than the model's (the account's limits are higher than the defaults,
	// or the refusals that started the episode were noise). Under the model's limits, EC2 is at most a token
	// or so ahead of it.
	calmProbes = 4
	// maxProbePause bounds the pause of probing after refused probes.
	maxProbePause = time.Minute
	// pacedPauses pauses in an episode show the action running at its bucket's refill rate for a while: the
	// fourth starts seven token times into the episode (1.4 s at 5 tokens a second), and random refusals
	// would hardly ever make so many runs of evidence (batchers space their polls then: pollSpacing).
	pacedPauses = 4
	// rateCut is what a refused model call leaves of the model's refill rate: EC2 had no token where the model
	// had one, so the account's bucket refills slower than the model (another client spends it too, or its
	// limits are lower). Halving finds a bucket 5 times smaller in three refusals.
	rateCut = 0.5
	// rateGrowth is how much each accepted call grows the rate back, up to the limit: a halved rate is whole
	// again after 45 accepted calls, so against a smaller bucket about one model call in 46 is refused.
	rateGrowth = 1.0 / 64
	// noisePrior is the share of refused model calls assumed before any is seen, worth one call: as many as
	// EC2 refuses at random in make bench's noisy case. A driver starts with an empty model, so its first
	// calls are probes: were a few refused probes enough to pause them, random refusals would pause a fresh
	// driver for seconds; against an empty bucket, it costs a few refused calls more.
	noisePrior = 0.3
	// minRateShare bounds the cuts: the rate stays at least this share of the limit's.
	minRateShare = 1.0 / 64
)

// ticketKind is how a call was let through: on a token of the model, or as a probe beyond it.
type ticketKind int

const (
	ticketModel ticketKind = iota
	ticketProbe
)

// ticket is a call's leave to go. For a model call, probes is the number of probes granted before it and
// probesOut whether any was in flight, to tell a call that raced a probe (see finish).
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

// bucketState models one action's bucket at EC2 and decides which calls go. It holds no lock and reads no
// clock: bucket does both, and tests drive it with times of their own.
type bucketState struct {
	limit Limit
	// tokens are the model's, refilled at rate to at. rate is limit.PerSecond at most, cut when EC2 refuses
	// model calls (at most once a token time: lastCut) and grown back as it accepts calls.
	tokens  float64
	at      time.Time
	rate    float64
	lastCut time.Time

	// window is how many probes may be in flight; probesGranted counts the probes let go, and probesDone
	// those that have ended (the difference is in flight).
	window                    int
	probesGranted, probesDone uint64
	// refusedProbes counts probes refused since one was accepted, and acceptedProbes those accepted since one
	// was refused.
	refusedProbes, acceptedProbes int
	// pauses counts the pauses of probing in this episode, and is above 0 while the action is throttled: EC2
	// refused calls beyond the model, so its bucket is as the model says and no fuller.
	pauses      int
	pausedUntil time.Time
	// recent holds whether each of the latest model calls was refused (a ring of noiseSamples); n is how many
	// it holds, next where the next goes.
	recent  [noiseSamples]bool
	n, next int
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

// refill brings the model to now. A full bucket ends a throttled episode: the action has been calm for as
// long as EC2 takes to refill it, so probing starts again from the initial window. It reports whether an
// episode ended.
func (s *bucketState) refill(now time.Time) (ended bool) {
	if now.After(s.at) {
		s.tokens += s.rate * now.Sub(s.at).Seconds()
		s.at = now
	}
	if s.tokens < float64(s.limit.Burst) {
		return false
	}
	s.tokens = float64(s.limit.Burst)
	if s.pauses == 0 {
		return false
	}
	s.calm()
	return true
}

// probesInFlight counts the probes let go that have not ended.
func (s *bucketState) probesInFlight() int { return int(s.probesGranted - s.probesDone) }

// calm ends a throttled episode.
func (s *bucketState) calm() {
	s.pauses, s.refusedProbes, s.acceptedProbes, s.pausedUntil, s.window = 0, 0, 0, time.Time{}, initialWindow
}

// grant lets one call go if it may: on a token of the model, else as a probe when the probe window has room
// and probing is not paused. Otherwise wait is how long until that may change by the clock alone (0: only a
// call's end can change it).
func (s *bucketState) grant(now time.Time) (t ticket, ok bool, wait time.Duration) {
	s.refill(now)
	if s.tokens >= 1 {
		s.tokens--
		return ticket{kind: ticketModel, probes: s.probesGranted, probesOut: s.probesInFlight() > 0}, true, 0
	}
	probeRoom := s.probesInFlight() < s.window
	if probeRoom && !now.Before(s.pausedUntil) {
		s.probesGranted++
		return ticket{kind: ticketProbe}, true, 0
	}
	if s.rate > 0 {
		wait = time.Duration(math.Ceil((1 - s.tokens) / s.rate * float64(time.Second)))
	}
	if probeRoom && (wait == 0 || s.pausedUntil.Sub(now) < wait) {
		wait = s.pausedUntil.Sub(now)
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

// finish records what EC2 made of a call let through on t. It reports whether the action became throttled
// (the first pause of an episode).
func (s *bucketState) finish(now time.Time, t ticket, o outcome) (throttled bool) {
	s.refill(now)
	// A model call that may have met EC2 after a probe (one was out when it went, went since, or is out still)
	// may have been refused for the probe's sake: its outcome says nothing of noise.
	raced := t.kind == ticketModel && (t.probesOut || s.probesGranted != t.probes || s.probesInFlight() > 0)
	if t.kind == ticketProbe {
		s.probesDone++
	}
	switch {
	case o == outcomeAccepted && t.kind == ticketProbe:
		// EC2 had a token the model did not, and has one less now: it is no emptier than the model at 0. (A
		// model call that raced the probe and found EC2 empty is refused, and empties the model in turn.)
		s.tokens = max(s.tokens-1, 0)
		s.growRate()
		s.refusedProbes = 0
		s.acceptedProbes++
		switch {
		case s.pauses == 0:
			// Room beyond the model: more calls may go beyond it at once.
			s.window = min(s.window+1, maxWindow)
		case s.acceptedProbes >= calmProbes:
			// As many calls beyond the model in a row show the account's bucket fuller than the model's.
			s.calm()
		}
	case o == outcomeAccepted:
		if !raced {
			s.sample(false)
			s.growRate()
		}
	case o == outcomeRefused && t.kind == ticketProbe:
		s.acceptedProbes = 0
		s.refusedProbes++
		// A run of refused probes shows the bucket empty once random refusals at the rate model calls meet
		// would make it unlikely, and at maxRefusedProbes whatever that rate: model calls refused that often
		// are no longer noise but a bucket smaller than the model's, or shared with busy clients. Until then
		// a refusal is noise, and the window stays as it is: under 30 % random refusals, a window cut at
		// each would let calls beyond the model go one or two at a time.
		if s.refusedProbes >= maxRefusedProbes || math.Pow(s.noise(), float64(s.refusedProbes)) < evidence {
			s.window = initialWindow
			return s.pause(now)
		}
	case o == outcomeRefused:
		// EC2's bucket held less than a token when the model had one: it is ahead of EC2 (other clients spend
		// the account's tokens too), and is now as empty as EC2's. Were the refused call's token given back,
		// the next call would go at once and be refused in turn until EC2 caught up. While the action is
		// throttled (probes have shown the bucket empty, so this is not noise), and unless a probe may have
		// taken EC2's token, the bucket also refills slower than the model: the rate is cut.
		s.tokens = min(s.tokens, 0)
		if !raced {
			s.sample(true)
			s.cutRate(now)
		}
	}
	return false
}

// pause stops probing for a while that doubles with each pause of the episode, from the time EC2 takes to
// refill one token.
func (s *bucketState) pause(now time.Time) (first bool) {
	s.pauses++
	// From the limit's token time, not the learned rate's: random refusals cut that rate too, and probing
	// must not stop for long because of them.
	d := maxProbePause
	if s.limit.PerSecond > 0 && s.pauses < 32 {
		d = min(maxProbePause, time.Duration(float64(time.Second)/s.limit.PerSecond*math.Exp2(float64(s.pauses-1))))
	}
	s.pausedUntil = now.Add(d)
	return s.pauses == 1
}

func (s *bucketState) sample(refused bool) {
	s.recent[s.next] = refused
	s.next = (s.next + 1) % noiseSamples
	s.n = min(s.n+1, noiseSamples)
}

// noise estimates the share of model calls EC2 refuses from the recent ones, starting from noisePrior worth
// one call, so that a few samples do not read as certainty either way.
func (s *bucketState) noise() float64 {
	refused := 0
	for i := range s.n {
		if s.recent[i] {
			refused++
		}
	}
	return (float64(refused) + noisePrior) / float64(s.n+1)
}

// throttled reports whether EC2 has throttled calls beyond the model in this episode.
func (s *bucketState) throttled() bool { return s.pauses > 0 }

// paced reports whether the episode has lasted through pacedPauses pauses: EC2 refused calls beyond the model
// each time a pause was over, so the action runs at the bucket's refill rate, and will for a while.
func (s *bucketState) paced() bool { return s.pauses >= pacedPauses }

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

// grantLocked is grant, telling onChange when a full bucket ended the episode. Caller holds b.mu.
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
// episode, not per call.
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
		paced := b.s.paced()
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
