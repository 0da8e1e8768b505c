// Package ctxsleep waits for a while unless a context ends first.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or returns ctx's error as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
