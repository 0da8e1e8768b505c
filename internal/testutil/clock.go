package testutil

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a Clock at a fixed instant, so tests do not depend on today's date.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
