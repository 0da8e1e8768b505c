// Package iolimits holds each volume of the fuse backend to the IOPS and throughput its EBS type and
// provisioning give it (limits.go has the figures), so that a gp3 volume at 3,000 IOPS performs like one and a
// ModifyVolume is felt by the workload.
//
// Design. Each volume has token buckets, one set counting operations and one counting bytes; an I/O takes
// Ops(len) operation tokens (EBS's accounting: up to 256 KiB is one operation on SSD types, 1 MiB on HDD types,
// larger I/O counts as several) and len byte tokens, from every bucket at once. A bucket may go into debt:
// the request is told to wait until the deepest debt it joined is paid back at that bucket's rate, so a
// request larger than a bucket still passes (after its deficit), and requests queue in arrival order without
// any queue being kept: each one's wait includes the debts of those before it. The reservation is made under
// the volume's mutex; the wait is slept after releasing it, honouring ctx (fuseblock cancels it at Close). A
// request whose wait is cut short keeps its tokens spent: only Close cuts waits, and nothing follows it.
//
// Buckets: a sustained bucket fills at the sustained rate and holds 1 s of it (Options.Window), the burst a
// volume may spend after idling. Types with burst credits (gp2 below 3,000 IOPS, st1, sc1) instead have a
// peak bucket at the burst rate holding 1 s of it, and a credit bucket at the sustained rate holding the whole
// credit balance (full when fakecloud first sees the volume, as EBS gives new volumes a full balance; a restart
// of fakecloud refills it). fsync is free: EBS does not count flushes as I/O, and they move no data. A
// fallocate (discard, write-zeroes) counts as one operation and no bytes: its length says nothing of the
// work, and a whole-device discard must not stall the volume for minutes.
//
// Limits come from a Lookup function (fakecloud's state, given by server.go), cached per volume and looked up
// again at most every Options.Refresh (250 ms), by one request at a time while others go on with the cached
// limits, so the hot path takes only the volume's own mutex. A volume the lookup does not know is not limited
// and is forgotten, and fuseblock's Forget drops a deleted one, so deleted volumes leave nothing behind. When
// the limits change, bucket balances carry over (capped at the new capacity), and a request already waiting
// keeps the wait it was given.
package iolimits

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/internal/ctxsleep"
	"github.com/diskforge/diskforge/pkg/fakecloud/fuseblock"
)

// Lookup gives a volume's performance spec, or false for a volume it does not know.
type Lookup func(volumeID string) (Spec, bool)

// Defaults of Options.
const (
	DefaultRefresh = 250 * time.Millisecond
	DefaultWindow  = time.Second
)

// Options configure a Policy.
type Options struct {
	Lookup Lookup
	// Refresh is how stale a volume's cached limits may get; 0 is DefaultRefresh.
	Refresh time.Duration
	// Window is how many seconds of its rate a sustained or peak bucket holds; 0 is DefaultWindow.
	Window time.Duration
	// Now and Sleep are the clock and the wait; tests give fakes. nil: time.Now and a sleep honouring ctx.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Policy is a fuseblock.Policy enforcing the limits. Safe for concurrent use.
type Policy struct {
	opts    Options
	volumes sync.Map // volume ID → *volume
}

var (
	_ fuseblock.Policy    = (*Policy)(nil)
	_ fuseblock.Forgetter = (*Policy)(nil)
)

// New returns a Policy; opts.Lookup is required.
func New(opts Options) *Policy {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Sleep == nil {
		opts.Sleep = ctxsleep.Sleep
	}
	return &Policy{opts: opts}
}

// Forget drops a deleted volume's buckets and counters (fuseblock.Forgetter): a volume gets no request after
// its deletion, so the lookup alone would never find it gone.
func (p *Policy) Forget(volumeID string) { p.volumes.Delete(volumeID) }

// Stats are what a volume's I/O was counted and told to wait, since fakecloud first saw it.
type Stats struct {
	Limits Limits
	// IOs are the requests seen, Ops the operations they counted as, Bytes the bytes they moved.
	IOs   int64
	Ops   float64
	Bytes int64
	// Waits are the requests told to wait, Waited the sum of the waits asked.
	Waits  int64
	Waited time.Duration
	// ExceededIOPS and ExceededThroughput are the time the volume had a request held by its operation buckets
	// (IOPS), and by its byte buckets (throughput): wall time, waits that overlap counted once, as EBS reports
	// the time a volume's demand exceeded what it was provisioned.
	ExceededIOPS, ExceededThroughput time.Duration
}

// Stats reports a volume's counters, or false when its limits are not known (yet, or any longer).
func (p *Policy) Stats(volumeID string) (Stats, bool) {
	v, ok := p.load(volumeID)
	if !ok {
		return Stats{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.stats, v.known
}

func (p *Policy) load(volumeID string) (*volume, bool) {
	x, ok := p.volumes.Load(volumeID)
	if !ok {
		return nil, false
	}
	return x.(*volume), true
}

// Before takes the request's tokens and waits for any deficit.
func (p *Policy) Before(ctx context.Context, io fuseblock.IO) error {
	var bytes int64
	switch io.Op {
	case fuseblock.OpRead, fuseblock.OpWrite:
		bytes = max(io.Len, 0)
	case fuseblock.OpFallocate:
	default: // fsync and anything else moving no data
		return nil
	}
	v, ok := p.load(io.Volume)
	if !ok {
		x, _ := p.volumes.LoadOrStore(io.Volume, &volume{})
		v = x.(*volume)
	}
	now := p.opts.Now()
	p.refresh(io.Volume, v, now)
	v.mu.Lock()
	var wait time.Duration
	if v.known {
		wait = v.take(now, bytes)
	}
	v.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	return p.opts.Sleep(ctx, wait)
}

// refresh looks the volume's limits up when they are stale and no other request is doing so. Until its first
// lookup has answered, a volume is not limited.
func (p *Policy) refresh(id string, v *volume, now time.Time) {
	if due := v.fetchedAt.Load(); (due == 0 || now.UnixNano()-due >= int64(p.opts.Refresh)) && v.refreshing.CompareAndSwap(false, true) {
		spec, ok := p.opts.Lookup(id)
		v.mu.Lock()
		v.fetchedAt.Store(max(now.UnixNano(), 1))
		if ok {
			v.set(now, ForSpec(spec), p.opts.Window, id)
		} else {
			v.known = false
		}
		v.mu.Unlock()
		v.refreshing.Store(false)
		if !ok {
			p.volumes.CompareAndDelete(id, v)
		}
	}
}

// bucket is a token bucket whose balance may go negative (a debt paid back at rate).
type bucket struct {
	rate, capacity, tokens float64
	credit                 bool // a credit balance rather than a 1 s window
}

// volume is one volume's limits, buckets and counters.
type volume struct {
	// fetchedAt (Unix ns, 0 never) and refreshing are read without mu, so that a request whose limits are
	// fresh does not contend on more than the take.
	fetchedAt  atomic.Int64
	refreshing atomic.Bool

	mu    sync.Mutex
	known bool
	last  time.Time // when the buckets were last filled
	ops   []bucket
	bytes []bucket
	stats Stats
	// opsHeld and bytesHeld are when the last wait each kind of bucket asked for ends.
	opsHeld, bytesHeld time.Time
}

// set applies limits; the buckets are filled to now first, and balances carry over into the new buckets.
func (v *volume) set(now time.Time, l Limits, window time.Duration, id string) {
	if v.known && l == v.stats.Limits {
		return
	}
	v.fill(now)
	ops := buckets(l.IOPS, l.BurstIOPS, l.IOPSCredits, window)
	bytes := buckets(l.Throughput, l.BurstThroughput, l.ThroughputCredits, window)
	if v.known {
		carry(ops, v.ops)
		carry(bytes, v.bytes)
		klog.V(2).InfoS("Volume I/O limits changed", "volume", id, "iops", l.IOPS, "throughputMiBps", l.Throughput/mib,
			"previousIops", v.stats.Limits.IOPS, "previousThroughputMiBps", v.stats.Limits.Throughput/mib)
	}
	v.ops, v.bytes, v.known, v.last = ops, bytes, true, now
	v.stats.Limits = l
}

// buckets are the buckets of one dimension: none when rate is 0 (unlimited), a 1 s window at the sustained
// rate, or with credits a 1 s window at the peak rate and a credit bucket at the sustained rate.
func buckets(rate, peak, credits float64, window time.Duration) []bucket {
	if rate <= 0 {
		return nil
	}
	w := window.Seconds()
	if peak > rate && credits > 0 {
		return []bucket{
			{rate: peak, capacity: peak * w, tokens: peak * w},
			{rate: rate, capacity: credits, tokens: credits, credit: true},
		}
	}
	return []bucket{{rate: rate, capacity: rate * w, tokens: rate * w}}
}

// carry moves balances (and debts) of old buckets into new ones of the same kind.
func carry(into, from []bucket) {
	for i := range into {
		for _, b := range from {
			if b.credit == into[i].credit {
				into[i].tokens = math.Min(b.tokens, into[i].capacity)
			}
		}
	}
}

// fill adds what each bucket earned since last.
func (v *volume) fill(now time.Time) {
	dt := now.Sub(v.last).Seconds()
	if dt <= 0 {
		return
	}
	v.last = now
	for _, bs := range [][]bucket{v.ops, v.bytes} {
		for i := range bs {
			bs[i].tokens = math.Min(bs[i].capacity, bs[i].tokens+bs[i].rate*dt)
		}
	}
}

// take spends an I/O's tokens and returns how long it must wait: until the deepest debt it is part of is paid.
func (v *volume) take(now time.Time, n int64) time.Duration {
	v.fill(now)
	ops := v.stats.Limits.Ops(n)
	opsWait, bytesWait := spend(v.ops, ops), spend(v.bytes, float64(n))
	v.stats.IOs++
	v.stats.Ops += ops
	v.stats.Bytes += n
	v.stats.ExceededIOPS += held(&v.opsHeld, now, opsWait)
	v.stats.ExceededThroughput += held(&v.bytesHeld, now, bytesWait)
	d := max(opsWait, bytesWait)
	if d <= 0 {
		return 0
	}
	v.stats.Waits++
	v.stats.Waited += d
	return d
}

// spend takes n tokens from each bucket and returns how long until the deepest debt among them is paid.
func spend(bs []bucket, n float64) time.Duration {
	wait := 0.0
	for i := range bs {
		b := &bs[i]
		b.tokens -= n
		if b.tokens < 0 {
			wait = math.Max(wait, -b.tokens/b.rate)
		}
	}
	return time.Duration(math.Ceil(wait * float64(time.Second)))
}

// held extends the time a kind of bucket holds the volume (until) by a wait starting now, and returns the
// time added: only what falls after until, so that requests held together count once.
func held(until *time.Time, now time.Time, wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	end := now.Add(wait)
	if !end.After(*until) {
		return 0
	}
	start := now
	if until.After(now) {
		start = *until
	}
	*until = end
	return end.Sub(start)
}
