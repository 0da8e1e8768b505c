// Package faults injects latency, EC2 errors, throttling and stuck transitions into fakecloud, so clients'
// retry, idempotency and wait logic can be tested against a misbehaving EC2. The API layer calls Before and
// After around each action; the state package asks Stuck before letting a transition progress.
package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/diskforge/diskforge/internal/ctxsleep"
)

// Injector applies a Config. It is safe for concurrent use. A nil *Injector injects nothing, so callers need
// no special case when faults are off.
type Injector struct {
	sleep func(ctx context.Context, d time.Duration) error
	rand  func() float64
	now   func() time.Time

	mu      sync.Mutex
	cfg     Config
	buckets buckets
}

// Option changes how an Injector waits, draws and tells time; tests use them to stay deterministic.
type Option func(*Injector)

// WithSleep replaces the latency sleep. It must return ctx's error if ctx ends first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(i *Injector) { i.sleep = sleep }
}

// WithRand replaces the source of error-fault draws; it must return values in [0,1).
func WithRand(rand func() float64) Option {
	return func(i *Injector) { i.rand = rand }
}

// WithClock replaces the clock the rate-limit buckets refill by.
func WithClock(now func() time.Time) Option {
	return func(i *Injector) { i.now = now }
}

// New returns an Injector applying cfg, or an error if cfg is invalid.
func New(cfg Config, opts ...Option) (*Injector, error) {
	i := &Injector{sleep: ctxsleep.Sleep, rand: rand.Float64, now: time.Now}
	for _, opt := range opts {
		opt(i)
	}
	if err := i.SetConfig(cfg); err != nil {
		return nil, err
	}
	return i, nil
}

// Config returns a copy of the live config. Counted error faults show the failures they have left.
func (i *Injector) Config() Config {
	if i == nil {
		return Config{}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.cfg.clone()
}

// SetConfig validates cfg and replaces the live config. Rate-limit buckets start again full.
func (i *Injector) SetConfig(cfg Config) error {
	if i == nil {
		return errors.New("no fault injector to configure")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid fault config: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.cfg = cfg.clone()
	i.buckets = newBuckets(i.cfg)
	return nil
}

// Before runs ahead of the action's handler: it sleeps the configured latency, then applies the rate limits,
// then the before-phase error faults. A non-nil result is an *ec2err.Error to answer instead of running the
// handler, or ctx's error (wrapped) if ctx ended during the latency. The request's parameters are unknown
// here, so the call draws from its action's own bucket, never an ACTION:unfiltered one; BeforeQuery tells.
func (i *Injector) Before(ctx context.Context, action string) error {
	return i.before(ctx, action, false)
}

// BeforeQuery is Before for a request whose EC2 Query parameters are known: a call that names neither a
// filter nor a page (Unfiltered) draws from its action's ACTION:unfiltered bucket when the config has one.
func (i *Injector) BeforeQuery(ctx context.Context, action string, params url.Values) error {
	return i.before(ctx, action, Unfiltered(params))
}

func (i *Injector) before(ctx context.Context, action string, unfiltered bool) error {
	if i == nil {
		return nil
	}
	i.mu.Lock()
	_, delay, _ := lookup(i.cfg.Latency, action)
	i.mu.Unlock()
	// Sleep without the lock so slow actions do not serialize the whole server.
	if delay > 0 {
		if err := i.sleep(ctx, time.Duration(delay)); err != nil {
			return fmt.Errorf("fault latency for %s: %w", action, err)
		}
	}

	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.buckets.take(action, unfiltered, i.now()); err != nil {
		return err
	}
	return i.errorFault(action, true)
}

// After runs once the handler has done its work: a non-nil result is an *ec2err.Error to answer instead of
// the handler's result.
func (i *Injector) After(action string) error {
	if i == nil {
		return nil
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.errorFault(action, false)
}

// Stuck reports whether the named transition (a Transition constant) must not progress: a plain entry holds
// every one, now and until the entry is lifted.
func (i *Injector) Stuck(transition string) bool {
	if i == nil {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Contains(i.cfg.Stuck, transition)
}

// HoldNext takes one hold from a counted entry (attach:N) for a transition starting now: true means the caller
// must hold that one transition for good (an attachment stays attaching until it is detached). The entry's count
// drops by one and the entry goes at zero, so GET on the admin endpoint shows what is left.
func (i *Injector) HoldNext(transition string) bool {
	if i == nil {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for k, entry := range i.cfg.Stuck {
		name, count, err := ParseStuckEntry(entry)
		if err != nil || name != transition || count == 0 {
			continue
		}
		if count == 1 {
			i.cfg.Stuck = slices.Delete(i.cfg.Stuck, k, k+1)
		} else {
			i.cfg.Stuck[k] = fmt.Sprintf("%s:%d", name, count-1)
		}
		return true
	}
	return false
}
