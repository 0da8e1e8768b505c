package ec2cloud

import (
	"context"
	"slices"
	"sync"
	"time"
)

// batcher coalesces the Describe calls of concurrent waits on one kind of resource (volumes, modifications,
// snapshots). Waits subscribe to the IDs they watch; when one of them wants a fresh look, the batcher makes
// one Describe call for every subscribed ID and hands each subscriber its result. A call starts at once when
// none is in flight; requests that arrive while one is in flight are served together by the next call, which
// starts as soon as the previous one returns. So there is no timer: an idle batcher adds no latency, and a
// busy one makes fewer calls per wait the busier it gets, since every call observes every waiting resource and
// waits that were observed on someone else's call skip their own poll (see waitFor).
type batcher[T any] struct {
	resource string
	fetch    func(ctx context.Context, ids []string) (map[string]T, error)
	size     int
	timeout  time.Duration
	metrics  *metrics
	// spacing is the least time between the starts of two calls, asked before each (0: none).
	spacing func() time.Duration

	mu   sync.Mutex
	subs map[string]map[*subscription[T]]struct{}
	// started numbers the calls; a subscription only takes results of calls that started after it.
	started uint64
	// inflight is the number of the call in progress, 0 between calls.
	inflight  uint64
	running   bool
	requested bool
	// lastStart is when the latest call started.
	lastStart time.Time
	// recent is the latest observation of each ID, kept for recentWindow (see last).
	recent map[string]observation[T]
}

// recentWindow is how long an observation is kept for callers that may act on what the cloud said a moment
// ago because the call they act with answers for itself when it was not so any more.
const recentWindow = 5 * time.Second

// observation is what one Describe call saw of one resource: its record, or that it was missing, or the
// error of the call. The call was sent at sent and answered at at.
type observation[T any] struct {
	value T
	found bool
	err   error
	sent  time.Time
	at    time.Time
}

// newBatcher makes a batcher; spacing may be nil (no spacing).
func newBatcher[T any](resource string, fetch func(ctx context.Context, ids []string) (map[string]T, error), o WaitOptions, m *metrics,
	spacing func() time.Duration) *batcher[T] {
	if spacing == nil {
		spacing = func() time.Duration { return 0 }
	}
	return &batcher[T]{resource: resource, fetch: fetch, size: o.BatchSize, timeout: o.FetchTimeout, metrics: m, spacing: spacing,
		subs: map[string]map[*subscription[T]]struct{}{}, recent: map[string]observation[T]{}}
}

// last returns the latest observation of id, if one was made within recentWindow, without a call.
func (b *batcher[T]) last(id string) (observation[T], bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.recent[id]
	if !ok || time.Since(o.sent) > recentWindow {
		return observation[T]{}, false
	}
	return o, true
}

// keepRecent stores what a call saw and drops observations that have aged out. Caller holds b.mu.
func (b *batcher[T]) keepRecent(results map[string]observation[T]) {
	for id, o := range b.recent {
		if time.Since(o.sent) > recentWindow {
			delete(b.recent, id)
		}
	}
	for id, o := range results {
		if o.err == nil {
			b.recent[id] = o
		}
	}
}

// subscription receives the observations of one ID until closed. The latest unread observation is kept;
// notify has a token when there is one.
type subscription[T any] struct {
	b      *batcher[T]
	id     string
	minSeq uint64
	notify chan struct{}

	mu    sync.Mutex
	obs   observation[T]
	fresh bool
}

// subscribe starts watching id. idle reports that no other wait was in progress, so the caller may poll at
// once without crowding anyone.
func (b *batcher[T]) subscribe(id string) (s *subscription[T], idle bool) {
	s = &subscription[T]{b: b, id: id, notify: make(chan struct{}, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	idle = !b.running && len(b.subs) == 0
	// Calls already in flight may have read the resource before the caller's own change: skip them.
	s.minSeq = b.started + 1
	if b.subs[id] == nil {
		b.subs[id] = map[*subscription[T]]struct{}{}
	}
	b.subs[id][s] = struct{}{}
	return s, idle
}

// close stops the subscription.
func (s *subscription[T]) close() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs[s.id], s)
	if len(b.subs[s.id]) == 0 {
		delete(b.subs, s.id)
	}
}

// request asks for a call that observes the subscription's ID (and every other subscribed one).
func (s *subscription[T]) request() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight != 0 && b.inflight >= s.minSeq {
		// The call in progress observes our ID and we will take its result: no need for another.
		return
	}
	s.mu.Lock()
	fresh := s.fresh
	s.mu.Unlock()
	if fresh {
		// A call ended between the caller's last look and this request: its observation, not yet taken,
		// answers it.
		return
	}
	b.requested = true
	if !b.running {
		b.running = true
		go b.run()
	}
}

// take returns the latest observation not yet taken.
func (s *subscription[T]) take() (observation[T], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fresh {
		return observation[T]{}, false
	}
	s.fresh = false
	return s.obs, true
}

func (s *subscription[T]) deliver(o observation[T]) {
	s.mu.Lock()
	s.obs, s.fresh = o, true
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// get makes (or joins) one call and returns what it saw of id.
func (b *batcher[T]) get(ctx context.Context, id string) (observation[T], error) {
	s, _ := b.subscribe(id)
	defer s.close()
	s.request()
	select {
	case <-ctx.Done():
		return observation[T]{}, ctx.Err()
	case <-s.notify:
		o, _ := s.take()
		return o, nil
	}
}

// run makes calls while they are requested, one after the other, no closer than spacing: requests that
// arrive while it holds off are served together by the next call.
func (b *batcher[T]) run() {
	for {
		b.mu.Lock()
		if !b.requested || len(b.subs) == 0 {
			b.running, b.requested = false, false
			b.mu.Unlock()
			return
		}
		if wait := time.Until(b.lastStart.Add(b.spacing())); wait > 0 {
			b.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		b.lastStart = time.Now()
		b.requested = false
		b.started++
		seq := b.started
		b.inflight = seq
		ids := make([]string, 0, len(b.subs))
		for id := range b.subs {
			ids = append(ids, id)
		}
		b.mu.Unlock()

		slices.Sort(ids)
		results := b.fetchAll(ids)

		b.mu.Lock()
		b.inflight = 0
		b.keepRecent(results)
		for id, o := range results {
			for s := range b.subs[id] {
				if s.minSeq <= seq {
					s.deliver(o)
				}
			}
		}
		b.mu.Unlock()
	}
}

// fetchAll describes ids in chunks of at most size, the chunks in parallel.
func (b *batcher[T]) fetchAll(ids []string) map[string]observation[T] {
	out := make(map[string]observation[T], len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for chunk := range slices.Chunk(ids, b.size) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
			defer cancel()
			sent := time.Now()
			found, err := b.fetch(ctx, chunk)
			at := time.Now()
			b.metrics.batchSize.WithLabelValues(b.resource).Observe(float64(len(chunk)))
			mu.Lock()
			defer mu.Unlock()
			for _, id := range chunk {
				v, ok := found[id]
				out[id] = observation[T]{value: v, found: ok, err: err, sent: sent, at: at}
			}
		})
	}
	wg.Wait()
	return out
}
