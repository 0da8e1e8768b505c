package iofaults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// Options shape an Injector. The zero value injects on any backend with real time and randomness.
type Options struct {
	// Unavailable, when not nil, is why faults cannot reach any I/O (fakecloud does not run the fuse backend):
	// Set refuses a non-empty rule set with it rather than accept rules that would never apply.
	Unavailable error
	// Sleep waits d or until ctx ends; nil waits on a timer. Tests count what was asked.
	Sleep func(ctx context.Context, d time.Duration) error
	// Float64 draws in [0,1) for probabilities; nil is math/rand/v2.
	Float64 func() float64
}

// Injector applies a replaceable set of rules to every I/O it is asked about. Safe for concurrent use.
type Injector struct {
	opts  Options
	rules atomic.Pointer[ruleSet]
	// mu serialises replacements, so that each old set is released exactly once.
	mu sync.Mutex
}

var _ fuseblock.Policy = (*Injector)(nil)

// ruleSet is immutable but for its rules' counters.
type ruleSet struct {
	rules []*ruleState
	// released is closed when the set is replaced: the I/Os its hang rules hold go on.
	released chan struct{}
}

type ruleState struct {
	compiled
	faulted atomic.Int64
	held    atomic.Int64
	left    atomic.Int64 // for Count > 0
}

// take consumes one application of a counted rule; false when none is left.
func (r *ruleState) take() bool {
	if r.Count == 0 {
		return true
	}
	for {
		n := r.left.Load()
		if n <= 0 {
			return false
		}
		if r.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// New makes an Injector with no rules.
func New(opts Options) *Injector {
	if opts.Sleep == nil {
		opts.Sleep = ctxsleep.Sleep
	}
	if opts.Float64 == nil {
		opts.Float64 = rand.Float64
	}
	i := &Injector{opts: opts}
	i.rules.Store(&ruleSet{released: make(chan struct{})})
	return i
}

// Set replaces every rule at once: I/Os held by the old rules are released (and ask the new rules), and
// counters start again at zero. An invalid rule leaves the old set in place.
func (i *Injector) Set(rules []Rule) error {
	if len(rules) > MaxRules {
		return invalid("%d rules; at most %d", len(rules), MaxRules)
	}
	if len(rules) > 0 && i.opts.Unavailable != nil {
		return i.opts.Unavailable
	}
	next := &ruleSet{released: make(chan struct{}), rules: make([]*ruleState, 0, len(rules))}
	for n, r := range rules {
		c, err := compile(r)
		if err != nil {
			return fmt.Errorf("rule %d: %w", n+1, err)
		}
		rs := &ruleState{compiled: c}
		rs.left.Store(c.Count)
		next.rules = append(next.rules, rs)
	}
	i.mu.Lock()
	old := i.rules.Swap(next)
	close(old.released)
	i.mu.Unlock()
	descs := make([]string, len(next.rules))
	for n, r := range next.rules {
		descs[n] = r.describe
	}
	klog.InfoS("I/O faults set", "rules", descs)
	return nil
}

// Clear removes every rule, releasing the I/Os they hold.
func (i *Injector) Clear() { _ = i.Set(nil) }

// Before applies the rules to one I/O: the latencies of every matching latency rule add up, then the first
// matching error, readonly or hang rule decides. A held I/O asks again once released.
func (i *Injector) Before(ctx context.Context, io fuseblock.IO) error {
	for {
		set := i.rules.Load()
		if len(set.rules) == 0 {
			return nil
		}
		var delay time.Duration
		var verdict *ruleState
		for _, r := range set.rules {
			if !r.matches(io) {
				continue
			}
			if r.Probability > 0 && r.Probability < 1 && i.opts.Float64() >= r.Probability {
				continue
			}
			if !r.take() {
				continue
			}
			r.faulted.Add(1)
			if r.Effect == EffectLatency {
				delay += time.Duration(r.Latency)
				continue
			}
			verdict = r
			break
		}
		if delay > 0 {
			if err := i.opts.Sleep(ctx, delay); err != nil {
				return syscall.EIO // the filesystem is closing
			}
		}
		if verdict == nil {
			return nil
		}
		switch verdict.Effect {
		case EffectError:
			return verdict.errno
		case EffectReadOnly:
			return syscall.EROFS
		}
		// Hang: wait for the set to be replaced, then ask the new one.
		verdict.held.Add(1)
		select {
		case <-set.released:
			verdict.held.Add(-1)
		case <-ctx.Done():
			verdict.held.Add(-1)
			return syscall.EIO
		}
	}
}

// RuleStatus is a rule with its counters.
type RuleStatus struct {
	Rule
	// Faulted counts the I/Os the rule applied to since it was set.
	Faulted int64 `json:"faulted"`
	// Held counts the I/Os a hang rule holds now.
	Held int64 `json:"held,omitempty"`
	// Left is how many applications a counted rule has left.
	Left *int64 `json:"left,omitempty"`
}

// Rules answers the current rules with their counters, in order.
func (i *Injector) Rules() []RuleStatus {
	set := i.rules.Load()
	out := make([]RuleStatus, 0, len(set.rules))
	for _, r := range set.rules {
		st := RuleStatus{Rule: r.Rule, Faulted: r.faulted.Load(), Held: r.held.Load()}
		if r.Count > 0 {
			left := max(r.left.Load(), 0)
			st.Left = &left
		}
		out = append(out, st)
	}
	return out
}
