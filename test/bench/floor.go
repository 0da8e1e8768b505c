package main

import (
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/diskforge/diskforge/pkg/fakecloud/faults"
)

// cycleStep is one EC2 call every cycle must make, in order, and the transition fakecloud then runs before the
// cycle can go on.
type cycleStep struct {
	action     string
	transition time.Duration
}

// cycleSteps are a cycle's calls under profile p, with the transitions the bench gives fakecloud (run).
func cycleSteps(p profile) []cycleStep {
	return []cycleStep{
		{"CreateVolume", p.Transition}, {"AttachVolume", p.Transition},
		{"DetachVolume", p.Transition}, {"DeleteVolume", 0},
	}
}

// rateLimitsOf is the rate-limit part of the fault config fakecloud runs with: the --rate-limits profile and
// any --fault-rate-limit among the extra fakecloud flags.
func rateLimitsOf(profileName string, fakecloudArgs []string) (faults.Config, error) {
	var spec faults.Spec
	fs := flag.NewFlagSet("fakecloud", flag.ContinueOnError)
	spec.RegisterFlags(fs)
	var ours []string
	for i := 0; i < len(fakecloudArgs); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(fakecloudArgs[i], "-"), "=")
		if name != "fault-rate-limit" && name != "rate-limits" {
			continue
		}
		ours = append(ours, fakecloudArgs[i])
		if !hasValue && i+1 < len(fakecloudArgs) {
			i++
			ours = append(ours, fakecloudArgs[i])
		}
	}
	if err := fs.Parse(ours); err != nil {
		return faults.Config{}, fmt.Errorf("--fakecloud-args: %w", err)
	}
	if profileName != "" {
		spec.RateLimits = profileName
	}
	cfg, err := faults.Spec{RateLimit: spec.RateLimit, RateLimits: spec.RateLimits}.Config()
	if err != nil {
		return faults.Config{}, fmt.Errorf("rate limits: %w", err)
	}
	return cfg, nil
}

// floor is the shortest time in which any client could run n cycles under the buckets of cfg (its profile,
// ActionRateLimits and shared RateLimit), all buckets full at the start. Each cycle makes each call of
// cycleSteps once, in order. A bucket of capacity C refilled at R per second hands out its n-th token no
// sooner than (n − C)/R; the cycle that takes the last token of step k then still waits out that step's
// transition and every later step's. So the floor is the largest, over the steps, of that release plus the
// transitions from the step on, and no less than the last cycle's arrival plus all the transitions; a shared
// bucket hands out the burst's 4n tokens in the same way. Polls and round trips are left out: the floor is
// what the limits and the transitions alone allow. It is math.MaxInt64 when a bucket that never refills holds
// too few tokens.
func floor(cfg faults.Config, n int, p profile) time.Duration {
	limits := cfg.ActionLimits()
	steps := cycleSteps(p)
	var after []time.Duration // after[k]: the transitions of steps k and later
	var sum time.Duration
	for k := len(steps) - 1; k >= 0; k-- {
		sum += steps[k].transition
		after = append([]time.Duration{sum}, after...)
	}
	var lastArrival time.Duration
	if n > 0 {
		lastArrival = p.Spread * time.Duration(n-1) / time.Duration(n)
	}
	best := lastArrival + after[0]
	for k, s := range steps {
		_, l, ok := faults.LimitFor(limits, s.action, false)
		if !ok || l.Burst <= 0 || n <= l.Burst {
			continue
		}
		if l.RequestsPerSecond <= 0 {
			return time.Duration(math.MaxInt64)
		}
		release := time.Duration(float64(n-l.Burst) / l.RequestsPerSecond * float64(time.Second))
		best = max(best, release+after[k])
	}
	if shared := cfg.RateLimit; shared.Burst > 0 && len(steps)*n > shared.Burst {
		if shared.RequestsPerSecond <= 0 {
			return time.Duration(math.MaxInt64)
		}
		release := time.Duration(float64(len(steps)*n-shared.Burst) / shared.RequestsPerSecond * float64(time.Second))
		best = max(best, release+steps[len(steps)-1].transition)
	}
	return best
}
