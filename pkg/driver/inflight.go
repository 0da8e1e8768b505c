package driver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inFlight guards keys (volume IDs, names, paths) so that a concurrent duplicate of an operation is told to
// come back later (Aborted) instead of racing the first. A hold lasts exactly as long as its handler runs,
// not until the RPC's deadline: the node's mkfs ignores the deadline (a run cut short leaves a device that is
// neither blank nor a filesystem), and a retry that started its own mkfs on the same device once the first
// call's deadline had passed would run two at once. Handlers that honour their context (every cloud call of
// the controller) end soon after its deadline, and so do their holds.
type inFlight struct {
	mu   sync.Mutex
	held map[string]*hold
	now  func() time.Time
}

// hold is one operation's hold on its keys.
type hold struct {
	since time.Time
}

func newInFlight(now func() time.Time) *inFlight {
	if now == nil {
		now = time.Now
	}
	return &inFlight{held: map[string]*hold{}, now: now}
}

// acquire holds every key, or none when any is held; busy is then how long the operation holding it has run.
// The returned release is idempotent.
func (f *inFlight) acquire(keys ...string) (release func(), busy time.Duration, ok bool) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if h, held := f.held[k]; held {
			return func() {}, now.Sub(h.since), false
		}
	}
	h := &hold{since: now}
	for _, k := range keys {
		f.held[k] = h
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, k := range keys {
				if f.held[k] == h {
					delete(f.held, k)
				}
			}
		})
	}, 0, true
}

// hold is acquire for an RPC on one resource: when it is held, the answer is Aborted, so the CO retries later.
// ctx is the RPC's; the hold does not end with it, but when the handler returns and calls release.
func (f *inFlight) hold(ctx context.Context, kind, id string) (release func(), err error) {
	return f.holdAll(ctx, fmt.Sprintf("%s %q", kind, id), kind+"/"+id)
}

// holdAll is hold for an RPC on several resources (a volume and its paths), what naming them for the error.
func (f *inFlight) holdAll(_ context.Context, what string, keys ...string) (release func(), err error) {
	release, busy, ok := f.acquire(keys...)
	if !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress (for %s)", what, busy.Round(time.Millisecond))
	}
	return release, nil
}
