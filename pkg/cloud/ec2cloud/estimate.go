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

// durationEstimates learn how long each kind of transition (create, attach, …) takes on this cloud, so that
// a wait can sleep through the part of the transition that is always there instead of polling it: on EC2 an
// attach takes seconds, and polling it from 50 ms on costs six or seven Describe calls before it can be done.
//
// A wait brackets its transition: it ended after the last look that saw the resource not done (or after the
// wait's start, if none did) and before the look that saw it done. The sample is the middle of that bracket,
// measured from the wait's start. Looks by other waits' calls count too, so a wait whose own first poll came
// late is still bracketed by the look before it; and one seen done at the very first look counts half its
// time. An estimate that is too long therefore shrinks quickly, and one that is too short costs a few polls
// and grows back to the truth. The estimate is the lower quartile of the recent samples:
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

// record adds a wait of kind what whose resource was last seen not done at notDone (0 if never) and first
// seen done at done, both from the wait's start.
func (e *durationEstimates) record(what string, notDone, done time.Duration) {
	took := max(notDone, 0) + (done-max(notDone, 0))/2
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
	d := s[len(s)/4]
	if d < e.floor {
		return 0
	}
	return d
}
