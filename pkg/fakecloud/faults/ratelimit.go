package faults

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// buckets holds the token buckets of a config: the shared one and those made per action on first use.
// The Injector's mutex guards it.
type buckets struct {
	shared    *rate.Limiter // nil when off
	limits    map[string]Limit
	perAction map[string]*rate.Limiter
}

// newBuckets starts every bucket full. Buckets refill by the times passed to take, so a test's fake clock
// drives them.
func newBuckets(cfg Config) buckets {
	b := buckets{limits: cfg.ActionRateLimits, perAction: map[string]*rate.Limiter{}}
	if cfg.RateLimit.enabled() {
		b.shared = newLimiter(cfg.RateLimit)
	}
	return b
}

func newLimiter(l Limit) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(l.RequestsPerSecond), l.Burst)
}

// take spends one token from the action's bucket and one from the shared bucket, or neither: a call refused
// by one bucket must not drain the other.
func (b *buckets) take(action string, now time.Time) error {
	lims := make([]*rate.Limiter, 0, 2)
	if lim := b.forAction(action); lim != nil {
		lims = append(lims, lim)
	}
	if b.shared != nil {
		lims = append(lims, b.shared)
	}
	// Checking before spending is exact because every use of these limiters holds the Injector's mutex.
	for _, lim := range lims {
		if lim.TokensAt(now) < 1 {
			return ec2err.New(ec2err.CodeRequestLimitExceeded, "Request limit exceeded.")
		}
	}
	for _, lim := range lims {
		lim.AllowN(now, 1)
	}
	return nil
}

// forAction returns the action's own bucket, making it on first use, or nil when the action has none.
// Under an AllActions entry each action still gets a bucket of its own, so buckets are keyed by action.
func (b *buckets) forAction(action string) *rate.Limiter {
	_, l, ok := lookup(b.limits, action)
	if !ok || !l.enabled() {
		return nil
	}
	if lim, ok := b.perAction[action]; ok {
		return lim
	}
	lim := newLimiter(l)
	b.perAction[action] = lim
	return lim
}
