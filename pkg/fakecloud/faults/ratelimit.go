package faults

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/diskforge/diskforge/pkg/fakecloud/ec2err"
)

// buckets holds the token buckets of a config: the shared one and those made per bucket key (an action, or
// ACTION:unfiltered) on first use. The Injector's mutex guards it.
type buckets struct {
	shared *rate.Limiter // nil when off
	// limits are the profile's entries overlaid with the config's own ActionRateLimits.
	limits map[string]Limit
	perKey map[string]*rate.Limiter
}

// newBuckets starts every bucket full. Buckets refill by the times passed to take, so a test's fake clock
// drives them. cfg has been validated, so its profile exists.
func newBuckets(cfg Config) buckets {
	b := buckets{limits: cfg.ActionLimits(), perKey: map[string]*rate.Limiter{}}
	if cfg.RateLimit.enabled() {
		b.shared = newLimiter(cfg.RateLimit)
	}
	return b
}

func newLimiter(l Limit) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(l.RequestsPerSecond), l.Burst)
}

// take spends one token from the call's own bucket and one from the shared bucket, or neither: a call refused
// by one bucket must not drain the other.
func (b *buckets) take(action string, unfiltered bool, now time.Time) error {
	lims := make([]*rate.Limiter, 0, 2)
	if lim := b.forCall(action, unfiltered); lim != nil {
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

// forCall returns the bucket the call draws from, making it on first use, or nil when it has none. Under a
// prefix or AllActions entry each action still gets a bucket of its own, so buckets are keyed by action (or
// ACTION:unfiltered), not by the entry that set their limit.
func (b *buckets) forCall(action string, unfiltered bool) *rate.Limiter {
	key, l, ok := LimitFor(b.limits, action, unfiltered)
	if !ok || !l.enabled() {
		return nil
	}
	if key != action+UnfilteredSuffix {
		key = action
	}
	if lim, ok := b.perKey[key]; ok {
		return lim
	}
	lim := newLimiter(l)
	b.perKey[key] = lim
	return lim
}
