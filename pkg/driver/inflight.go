package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inFlight guards keys (volume IDs, names) so that a concurrent duplicate of an operation is told to come
// back later (Aborted) instead of racing the first. A hold ends when its operation returns, and never outlives
// the operation's deadline: a stuck handler cannot block a key forever.
type inFlight struct {
	mu   sync.Mutex
	held map[string]time.Time
	now  func() time.Time
}

// maxHold bounds holds of operations whose context has no deadline.
const maxHold = 10 * time.Minute

func newInFlight(now func() time.Time) *inFlight {
	if now == nil {
		now = time.Now
	}
	return &inFlight{held: map[string]time.Time{}, now: now}
}

// acquire holds every key for ctx's operation, or none when any is held. The returned release is idempotent.
func (f *inFlight) acquire(ctx context.Context, keys ...string) (release func(), ok bool) {
	now := f.now()
	until := now.Add(maxHold)
	if d, has := ctx.Deadline(); has && d.Before(until) {
		until = d
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if exp, busy := f.held[k]; busy && now.Before(exp) {
			return func() {}, false
		}
	}
	for _, k := range keys {
		f.held[k] = until
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, k := range keys {
				if f.held[k] == until {
					delete(f.held, k)
				}
			}
		})
	}, true
}

// hold is acquire for an RPC on one resource: when it is held, the answer is Aborted, so the CO retries later.
func (f *inFlight) hold(ctx context.Context, kind, id string) (release func(), err error) {
	return f.holdAll(ctx, fmt.Sprintf("%s %q", kind, id), kind+"/"+id)
}

// holdAll is hold for an RPC on several resources (a volume and its paths), what naming them for the error.
func (f *inFlight) holdAll(ctx context.Context, what string, keys ...string) (release func(), err error) {
	release, ok := f.acquire(ctx, keys...)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", what)
	}
	return release, nil
}
