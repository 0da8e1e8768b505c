package faults

import (
	"context"
	"sync"
	"testing"
	"time"
)

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
