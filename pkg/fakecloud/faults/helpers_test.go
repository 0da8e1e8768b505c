package faults

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the rate-limit buckets.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sleepRecorder records requested sleeps instead of sleeping, and honours a cancelled ctx.
type sleepRecorder struct {
	mu    sync.Mutex
	slept []time.Duration
}

func (s *sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slept = append(s.slept, d)
	return nil
}

// seq returns a rand function yielding vals in turn, then repeating the last.
func seq(vals ...float64) func() float64 {
	var mu sync.Mutex
	i := 0
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := vals[min(i, len(vals)-1)]
		i++
		return v
	}
}

func mustNew(t *testing.T, cfg Config, opts ...Option) *Injector {
	t.Helper()
	inj, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return inj
}
