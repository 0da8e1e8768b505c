package ec2cloud

import (
	"slices"
	"sync"
	"time"
)

// estimateWindow is how many recent waits of a kind the estimate is drawn from.
const estimateWindow = 16

// estimateMinSamples is how many waits of a kind must have ended before their estimate is used.
const estimateMinSamples = 3

// estimateLead is the part of the estimate a wait sleeps before its first poll: a little early, so that a
// transition as fast as the usual one is seen with one more short poll at most.
const estimateLead = 0.9

// durationEstimates learn how long each kind of transition (create, attach, …) takes on this cloud, so that
// a wait can sleep through the part of the transition that is always there instead of polling it: on EC2 an
// attach takes seconds, and polling it from 50 ms on costs six or seven Describe calls before it can be done.
//
// A sample is when the wait first saw its resource done, measured from the wait's start. That bounds the
// transition from above; when the very first poll saw it done, the transition may have been much shorter, so
// the sample is halved. An estimate that is too long therefore shrinks quickly, and one that is too short
// costs a few polls and grows back to the truth. The estimate is the lower quartile of the recent samples:
// a slow transition now and then does not delay the next ones, and a cloud that got faster is followed within
// a few waits (a wait that sleeps too long costs latency; one that wakes too early, only a poll).
type durationEstimates struct {
	// floor: estimates below it are not used; so short a transition is better polled at once.
	floor time.Duration

	mu      sync.Mutex
	samples map[string][]time.Duration
}

func newDurationEstimates(floor time.Duration) *durationEstimates {
	return &durationEstimates{floor: floor, samples: map[string][]time.Duration{}}
}

// record adds a wait of kind what that saw its resource done after took, having polled pending before.
func (e *durationEstimates) record(what string, took time.Duration, sawPending bool) {
	if !sawPending {
		took /= 2
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s := append(e.samples[what], took)
	if len(s) > estimateWindow {
		s = s[len(s)-estimateWindow:]
	}
	e.samples[what] = s
}

// firstPoll is how long a new wait of kind what sleeps before its first poll: 0 (poll by the usual schedule)
// until enough waits of the kind have ended, or when the kind's transitions are too short to sleep through.
func (e *durationEstimates) firstPoll(what string) time.Duration {
	e.mu.Lock()
	s := slices.Clone(e.samples[what])
	e.mu.Unlock()
	if len(s) < estimateMinSamples {
		return 0
	}
	slices.Sort(s)
	d := time.Duration(float64(s[len(s)/4]) * estimateLead)
	if d < e.floor {
		return 0
	}
	return d
}
