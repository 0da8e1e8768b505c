package ec2cloud

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"k8s.io/klog/v2"
)

// WaitOptions shape the polling for asynchronous work. Zero fields take the defaults.
type WaitOptions struct {
	// Initial is the delay before the first poll of a new wait while other waits are in progress; a wait that
	// starts when none is in progress polls at once, so an idle cloud adds no latency. Default 50ms.
	Initial time.Duration
	// Multiplier grows the interval after each poll. Default 1.5.
	Multiplier float64
	// Max caps the interval. Default 5s.
	Max time.Duration
	// Jitter randomizes each interval by ±Jitter (below 1). Default 0.1; negative turns jitter off.
	Jitter float64
	// ConsistencyGrace is how long a resource (or an attachment) missing right after the call that made it is
	// taken for EC2's eventual consistency before the wait fails. Default 10s.
	ConsistencyGrace time.Duration
	// BatchSize caps the IDs one Describe call carries. Default 200.
	BatchSize int
	// FetchTimeout bounds one batched Describe call, which serves many waits and so has no caller's context.
	// Default 30s.
	FetchTimeout time.Duration
	// FixedSchedule polls by the schedule above alone. By default a wait first sleeps through most of the
	// time its kind of transition has recently taken (see durationEstimates).
	FixedSchedule bool
}

func (w WaitOptions) withDefaults() WaitOptions {
	if w.Initial <= 0 {
		w.Initial = 50 * time.Millisecond
	}
	if w.Multiplier < 1 {
		w.Multiplier = 1.5
	}
	if w.Max <= 0 {
		w.Max = 5 * time.Second
	}
	if w.Max < w.Initial {
		w.Max = w.Initial
	}
	switch {
	case w.Jitter < 0:
		w.Jitter = 0
	case w.Jitter == 0:
		w.Jitter = 0.1
	case w.Jitter >= 1:
		w.Jitter = 0.99
	}
	if w.ConsistencyGrace <= 0 {
		w.ConsistencyGrace = 10 * time.Second
	}
	if w.BatchSize <= 0 {
		w.BatchSize = 200
	}
	if w.FetchTimeout <= 0 {
		w.FetchTimeout = 30 * time.Second
	}
	return w
}

// newBackOff is the poll schedule of one wait: Initial, then growing by Multiplier up to Max, with jitter.
// It never gives up by itself; the caller's context bounds the wait.
func (w WaitOptions) newBackOff() backoff.BackOff { return w.backOffFrom(w.Initial) }

// settleFraction sets how closely a wait looks once it has slept through the time its kind of transition
// usually takes: every estimate/settleFraction (at least Initial), growing from there, and a look by another
// wait's call that recent stands for its own. The waits of a burst start spread over the time the cloud takes
// to accept the calls (0.07–0.1 s for 100 creates on two cores), and a fixed Initial after a 1 s sleep gave
// each stage of a burst three looks 50 ms apart where two serve; a tenth of the transition bounds what it adds
// to latency at a tenth.
const settleFraction = 10

// settleInterval is the first interval after a sleep of estimate, within [Initial, Max].
func (w WaitOptions) settleInterval(estimate time.Duration) time.Duration {
	return min(w.Max, max(w.Initial, estimate/settleFraction))
}

// backOffFrom is the schedule of newBackOff starting at initial.
func (w WaitOptions) backOffFrom(initial time.Duration) backoff.BackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: w.Jitter,
		Multiplier:          w.Multiplier,
		MaxInterval:         w.Max,
		MaxElapsedTime:      0,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// What a wait waits for, as the wait metric labels it.
const (
	waitCreate = "create"
	waitAttach = "attach"
	waitDetach = "detach"
	waitModify = "modify"
	// waitModifyComplete waits for a modification to finish optimizing too, which takes far longer.
	waitModifyComplete = "modify-complete"
	waitSnapshot       = "snapshot"
)

// lateLook is how much later than its interval a look may come (answered, counted from when it was due) and
// still bracket the transition: a busy cloud answers within a few hundred milliseconds, a cloud that was
// down (the SDK retrying through it) seconds late. A wait with a late look, or one that saw a poll fail,
// records no sample: its time measures the outage, not the transition, and would make the next waits sleep
// through transitions long over.
const lateLook = time.Second

// checkFunc judges an observation: done, failed (err), or neither (keep waiting).
type checkFunc[T any] func(o observation[T]) (done bool, err error)

// waitFor polls id through b until check reports done or an error, or ctx ends (then it returns ctx's error).
//
// The schedule comes from WaitOptions: a wait that starts while no other is in progress polls at once, others
// poll after Initial; then the interval grows. Once waits of its kind have ended, a wait first sleeps through
// the time they usually took, then polls by that schedule from the settle interval on. Every observation of id counts, including those
// from calls other waits asked for: a wait whose poll falls due after such a call observed id within the
// interval it waited skips its own. So under load one Describe call serves many waits, and no wait is
// observed less often than its own schedule.
func waitFor[T any](ctx context.Context, c *Cloud, b *batcher[T], what, id string, check checkFunc[T]) (err error) {
	start := time.Now()
	defer func() {
		result := "done"
		switch {
		case ctx.Err() != nil:
			result = "timeout"
		case err != nil:
			result = "failed"
		}
		c.metrics.waitDuration.WithLabelValues(what, result).Observe(time.Since(start).Seconds())
	}()
	if c.unbatched {
		// For comparison in benchmarks only: every wait polls on its own.
		b = newBatcher(b.resource, b.fetch, c.wait, c.metrics, b.spacing)
	}
	var sleep time.Duration
	if !c.wait.FixedSchedule {
		sleep = c.estimates.firstPoll(what)
		// A caller whose deadline falls within the estimate still gets polls before it gives up: a wait that
		// only slept would time out without a look, and so would every retry of it.
		if deadline, ok := ctx.Deadline(); ok {
			sleep = min(sleep, time.Until(deadline)/2)
		}
	}
	sub, idle := b.subscribe(id)
	defer sub.close()
	bo := c.wait.newBackOff()

	// awaiting: we asked for a call and wait for its result. lastLook: when the latest call that saw id not
	// done was sent, whoever asked for it. gap: the interval the timer was set for; a look within it, before
	// the timer fires, is as good as a poll of our own.
	var (
		awaiting bool
		lastLook time.Time
		gap      time.Duration
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// learned: the schedule has taken the estimate of this kind of transition into account, at the start
	// (the sleep) or since. due: when the timer fires.
	learned := sleep > 0 || c.wait.FixedSchedule
	var due time.Time
	setTimer := func(at time.Time) {
		due = at
		timer.Reset(max(time.Until(at), 0))
	}
	// learn lets a wait that started before anything was known of its kind learn as soon as the first ones
	// end (in a burst, the others of its burst): a next poll that the growing interval puts past the time this
	// one should be done comes forward to it, and the schedule starts over from Initial there. Otherwise the
	// rest of a burst would be seen up to half a transition late.
	learn := func(from time.Time) {
		if learned || due.IsZero() {
			return
		}
		e := c.estimates.firstPoll(what)
		if e <= 0 || !start.Add(e).Before(due) {
			return
		}
		learned = true
		gap = c.wait.settleInterval(e)
		bo = c.wait.backOffFrom(gap)
		setTimer(later(start.Add(e), from.Add(gap)))
	}
	// arm sets the timer to the next interval of the schedule, counted from the look at from.
	arm := func(from time.Time) {
		gap = bo.NextBackOff()
		setTimer(from.Add(gap))
		learn(from)
	}
	switch {
	case sleep > 0:
		// Only a look in the last settle interval of the sleep stands for the first poll: earlier ones were
		// too early to tell anything.
		gap = c.wait.settleInterval(sleep)
		bo = c.wait.backOffFrom(gap)
		setTimer(start.Add(sleep))
	case idle:
		timer.Stop()
		due = start
		awaiting = true
		sub.request()
	default:
		arm(start)
	}
	// disturbed: a poll failed or a look came late (see lateLook); the wait's time is no sample.
	var disturbed bool
	// observe takes the latest observation, if there is one: finished reports that the wait is over.
	observe := func() (finished bool, err error) {
		o, ok := sub.take()
		if !ok {
			return false, nil
		}
		if o.err != nil || o.at.Sub(due) > gap+lateLook {
			disturbed = true
		}
		done, err := check(o)
		if done && err == nil && !c.wait.FixedSchedule && !disturbed {
			// From when the calls were sent: on a busy cloud an answer can take longer than the transition.
			notDone := time.Duration(0)
			if !lastLook.IsZero() {
				notDone = lastLook.Sub(start)
			}
			c.estimates.record(what, notDone, o.sent.Sub(start))
		}
		if done || err != nil {
			return true, err
		}
		lastLook = o.sent
		if awaiting {
			awaiting = false
			arm(lastLook)
		} else {
			// Someone else's call: it may have shown others of our kind done, and so taught us when to look.
			learn(lastLook)
		}
		return false, nil
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.notify:
			if finished, err := observe(); finished {
				return err
			}
		case now := <-timer.C:
			// An observation that arrived as the timer fired counts first: select picks among ready cases at
			// random, and a wait that polled past it would start a call the others had just made.
			if finished, err := observe(); finished {
				return err
			}
			if !lastLook.IsZero() && now.Sub(lastLook) < gap {
				// Someone else's call looked within the interval: that was our poll.
				arm(now)
				continue
			}
			awaiting = true
			sub.request()
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// transientPollError decides what a failed Describe call means to a wait: transient failures (throttling,
// unavailable) are logged and the wait goes on; anything else ends it.
func transientPollError(err error, what, id string) error {
	if isTransient(err) {
		klog.V(4).InfoS("Poll failed; will poll again", "what", what, "id", id, "err", err)
		return nil
	}
	return err
}

// graceClock tracks how long a resource has been missing from observations that should show it.
type graceClock struct {
	grace time.Duration
	since time.Time
}

// expired reports whether the resource has been missing longer than the grace; present resets it.
func (g *graceClock) expired(missing bool, at time.Time) bool {
	if !missing {
		g.since = time.Time{}
		return false
	}
	if g.since.IsZero() {
		g.since = at
	}
	return at.Sub(g.since) > g.grace
}

// seen names the last state a wait saw, for its timeout error.
func seen[S ~string](s S) string {
	if s == "" {
		return "not yet seen"
	}
	return string(s)
}
