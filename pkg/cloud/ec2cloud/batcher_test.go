package ec2cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeFetch records the calls a batcher makes; each call answers every ID with the call's number, except
// the IDs in missing. hold, when set, blocks the first call until it is closed.
type fakeFetch struct {
	mu      sync.Mutex
	calls   [][]string
	missing map[string]bool
	err     error
	hold    chan struct{}
	started chan struct{}
}

func (f *fakeFetch) fetch(_ context.Context, ids []string) (map[string]int, error) {
	f.mu.Lock()
	f.calls = append(f.calls, ids)
	n := len(f.calls)
	hold := f.hold
	f.mu.Unlock()
	if n == 1 && hold != nil {
		close(f.started)
		<-hold
	}
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]int{}
	for _, id := range ids {
		if !f.missing[id] {
			out[id] = n
		}
	}
	return out, nil
}

func (f *fakeFetch) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func testBatcher(f *fakeFetch, size int) *batcher[int] {
	return newBatcher("test", f.fetch, WaitOptions{BatchSize: size}.withDefaults(), newMetrics(nil), nil)
}

// subscribers counts the batcher's subscriptions.
func (b *batcher[T]) subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.subs {
		n += len(s)
	}
	return n
}

// TestBatcherCoalesces: while one call is in flight, any number of requests wait for the next call, which
// serves them all; and they do not take the result of the call that started before they subscribed.
func TestBatcherCoalesces(t *testing.T) {
	f := &fakeFetch{hold: make(chan struct{}), started: make(chan struct{})}
	b := testBatcher(f, 200)
	const n = 50
	results := make([]int, n)
	var wg sync.WaitGroup
	get := func(i int) {
		o, err := b.get(context.Background(), fmt.Sprintf("vol-%d", i))
		if err != nil || o.err != nil || !o.found {
			t.Errorf("get %d: %v %v %v", i, err, o.err, o.found)
		}
		results[i] = o.value
	}
	wg.Go(func() { get(0) })
	<-f.started // the first call is in flight
	for i := 1; i < n; i++ {
		wg.Go(func() { get(i) })
	}
	for b.subscribers() < n {
		time.Sleep(time.Millisecond)
	}
	close(f.hold)
	wg.Wait()
	if got := f.count(); got != 2 {
		t.Fatalf("%d gets made %d calls, want 2 (one in flight, one for all the others)", n, got)
	}
	if len(f.calls[1]) < n-1 {
		t.Errorf("second call carried %d IDs, want at least %d", len(f.calls[1]), n-1)
	}
	for i := 1; i < n; i++ {
		if results[i] != 2 {
			t.Errorf("get %d saw call %d, which started before it subscribed; want call 2", i, results[i])
		}
	}
}

func TestBatcherMissingErrorsAndChunks(t *testing.T) {
	f := &fakeFetch{missing: map[string]bool{"vol-gone": true}}
	b := testBatcher(f, 3)
	o, err := b.get(context.Background(), "vol-gone")
	if err != nil || o.err != nil || o.found {
		t.Fatalf("missing ID: %+v %v, want found=false", o, err)
	}

	// Seven subscribers, one request: one round of calls in chunks of three.
	var subs []*subscription[int]
	for i := range 7 {
		s, _ := b.subscribe(fmt.Sprintf("vol-%d", i))
		subs = append(subs, s)
	}
	before := f.count()
	subs[0].request()
	for _, s := range subs {
		<-s.notify
		if o, ok := s.take(); !ok || !o.found {
			t.Errorf("%s: no observation", s.id)
		}
		s.close()
	}
	if got := f.count() - before; got != 3 {
		t.Errorf("7 IDs in chunks of 3 made %d calls, want 3", got)
	}
	for _, c := range f.calls[before:] {
		if len(c) > 3 {
			t.Errorf("a call carried %d IDs, more than the batch size", len(c))
		}
	}

	f.err = errors.New("throttled")
	o, err = b.get(context.Background(), "vol-1")
	if err != nil || o.err == nil {
		t.Fatalf("failed call: %+v %v, want the call's error in the observation", o, err)
	}
}

func TestBatcherGetHonoursContext(t *testing.T) {
	f := &fakeFetch{hold: make(chan struct{}), started: make(chan struct{})}
	b := testBatcher(f, 200)
	go func() { _, _ = b.get(context.Background(), "vol-a") }()
	<-f.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.get(ctx, "vol-b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("get with a canceled context = %v", err)
	}
	close(f.hold)
}

// TestWaitForSkipsPollsOthersMade: a wait that keeps being observed through other waits' calls makes no call
// of its own.
func TestWaitForSkipsPollsOthersMade(t *testing.T) {
	f := &fakeFetch{}
	c := &Cloud{wait: WaitOptions{Initial: time.Hour, Max: time.Hour, FixedSchedule: true}.withDefaults(), metrics: newMetrics(nil)}
	b := testBatcher(f, 200)
	// Another subscriber keeps the batcher from being idle, so the wait does not poll at once.
	other, _ := b.subscribe("vol-other")
	defer other.close()
	done := make(chan error)
	go func() {
		done <- waitFor(context.Background(), c, b, "test", "vol-w", func(o observation[int]) (bool, error) {
			return o.value >= 3, nil
		})
	}()
	for b.subscribers() < 2 {
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		other.request()
		<-other.notify
		other.take()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.count(); got != 3 {
		t.Errorf("calls = %d, want the other subscriber's 3 only", got)
	}
}

// TestBatcherKeepsRecentObservations: what a call saw of an ID is kept for recentWindow, failed calls are not
// kept, and older observations age out.
func TestBatcherKeepsRecentObservations(t *testing.T) {
	f := &fakeFetch{}
	b := testBatcher(f, 200)
	if _, ok := b.last("vol-a"); ok {
		t.Fatal("an observation before any call")
	}
	if _, err := b.get(context.Background(), "vol-a"); err != nil {
		t.Fatal(err)
	}
	if o, ok := b.last("vol-a"); !ok || !o.found || o.value != 1 {
		t.Errorf("last after a call = %+v, %v; want the call's observation", o, ok)
	}
	b.mu.Lock()
	b.keepRecent(map[string]observation[int]{
		"vol-old":    {found: true, sent: time.Now().Add(-recentWindow - time.Second)},
		"vol-failed": {err: errors.New("throttled"), sent: time.Now()},
	})
	b.mu.Unlock()
	for _, id := range []string{"vol-old", "vol-failed"} {
		if o, ok := b.last(id); ok {
			t.Errorf("last(%s) = %+v; want nothing", id, o)
		}
	}
}

// TestRequestAnsweredByUntakenObservation: a request made after a call delivered an observation its subscriber
// has not taken yet starts no call: that observation answers it. (A wait whose timer fired just as a call
// ended used to start another call right behind it.)
func TestRequestAnsweredByUntakenObservation(t *testing.T) {
	f := &fakeFetch{}
	b := testBatcher(f, 200)
	s, _ := b.subscribe("vol-a")
	defer s.close()
	s.request()
	<-s.notify
	s.request()
	// Give a wrongly started call time to happen.
	time.Sleep(20 * time.Millisecond)
	if got := f.count(); got != 1 {
		t.Fatalf("calls = %d after a request with an observation untaken, want 1", got)
	}
	if o, ok := s.take(); !ok || o.value != 1 {
		t.Fatalf("take = %+v, %v; want the first call's observation", o, ok)
	}
	s.request()
	<-s.notify
	if got := f.count(); got != 2 {
		t.Errorf("calls = %d after a request once the observation was taken, want 2", got)
	}
}

// TestWaitLearnsMidWait: a wait that started before anything was known of its kind, and whose growing
// interval would next poll long after the transition, comes forward to the estimate once other waits of its
// kind have ended, instead of sleeping out the interval.
func TestWaitLearnsMidWait(t *testing.T) {
	f := &fakeFetch{}
	c := &Cloud{wait: WaitOptions{Initial: 10 * time.Millisecond, Multiplier: 20, Max: 10 * time.Second, Jitter: -1}.withDefaults(),
		metrics: newMetrics(nil), estimates: newDurationEstimates(0)}
	b := testBatcher(f, 200)
	// Another subscriber keeps the batcher from being idle, so the wait polls by its schedule: at 10 ms, then
	// 200 ms later, then 4 s later.
	other, _ := b.subscribe("vol-other")
	defer other.close()
	const transition = 300 * time.Millisecond
	start := time.Now()
	done := make(chan error)
	go func() {
		done <- waitFor(context.Background(), c, b, waitCreate, "vol-w", func(o observation[int]) (bool, error) {
			return o.sent.Sub(start) >= transition, nil
		})
	}()
	// The others of the burst end and teach the estimate; a call of theirs shows our volume still creating.
	time.Sleep(50 * time.Millisecond)
	for range estimateMinSamples {
		c.estimates.record(waitCreate, transition-20*time.Millisecond, transition+20*time.Millisecond)
	}
	other.request()
	<-other.notify
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("the wait ended after %v; with the estimate learned mid-wait it polls at about %v", took, transition)
	}
}
