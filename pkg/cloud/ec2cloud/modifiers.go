package ec2cloud

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/diskforge/diskforge/pkg/cloud"
	"github.com/diskforge/diskforge/pkg/volumetypes"
)

// modifiers runs the modifications of each volume one after the other, and coalesces the requests that meet
// on a volume (ResizeDisk from an expansion, ModifyDisk from a new VolumeAttributesClass) into one
// ModifyVolume: EC2 allows one modification at a time and only a few a day. There is no timer. The first
// request starts a round at once; requests that arrive while the round reads the disk join it; requests that
// arrive later form the next round, which starts as soon as the previous one returns (and, as EC2 requires,
// sends its ModifyVolume once the previous modification has completed).
type modifiers struct {
	c *Cloud

	mu     sync.Mutex
	queues map[string]*modifyQueue
	// unsettled are the volumes whose last modification (ours) was answered usable before it completed: EC2
	// takes their next one only once it has.
	unsettled map[string]bool
}

// modifyQueue is one volume's round being gathered.
type modifyQueue struct {
	next *modifyRound
	// state is the last state seen of the modification in progress, for the errors of callers that give up.
	state atomic.Value
}

// modifyRound is the requests one ModifyVolume serves. Its context ends when every request's has.
type modifyRound struct {
	ctx    context.Context
	cancel context.CancelFunc
	live   int
	reqs   []*modifyRequest
}

type modifyRequest struct {
	ctx  context.Context
	opts cloud.ModifyOptions
	// grow: a ResizeDisk, for which a size the disk already has is no change (not a shrink).
	grow bool
	done chan modifyResult
}

type modifyResult struct {
	m   *cloud.Modification
	err error
}

func newModifiers(c *Cloud) *modifiers {
	return &modifiers{c: c, queues: map[string]*modifyQueue{}, unsettled: map[string]bool{}}
}

// submit queues a modification of the volume and waits for its round.
func (ms *modifiers) submit(ctx context.Context, volumeID string, opts cloud.ModifyOptions, grow bool) (*cloud.Modification, error) {
	r := &modifyRequest{ctx: ctx, opts: opts, grow: grow, done: make(chan modifyResult, 1)}
	ms.mu.Lock()
	q, running := ms.queues[volumeID]
	if !running {
		q = &modifyQueue{}
		ms.queues[volumeID] = q
	}
	ms.join(q, r)
	ms.mu.Unlock()
	if !running {
		go ms.run(volumeID, q)
	}
	select {
	case res := <-r.done:
		return res.m, res.err
	case <-ctx.Done():
		state, _ := q.state.Load().(string)
		return nil, fmt.Errorf("modify disk %s: modification still %s: %w", volumeID, cmp.Or(state, "not started"), ctx.Err())
	}
}

// join adds r to the round being gathered; the caller holds ms.mu.
func (ms *modifiers) join(q *modifyQueue, r *modifyRequest) {
	if q.next == nil {
		ctx, cancel := context.WithCancel(context.Background())
		q.next = &modifyRound{ctx: ctx, cancel: cancel}
	}
	round := q.next
	round.reqs = append(round.reqs, r)
	round.live++
	context.AfterFunc(r.ctx, func() {
		ms.mu.Lock()
		defer ms.mu.Unlock()
		if round.live--; round.live == 0 {
			round.cancel()
		}
	})
}

// run serves the volume's rounds until none is waiting.
func (ms *modifiers) run(volumeID string, q *modifyQueue) {
	for {
		ms.mu.Lock()
		round := q.next
		if round == nil {
			delete(ms.queues, volumeID)
			ms.mu.Unlock()
			return
		}
		ms.mu.Unlock()

		d, err := ms.c.GetDisk(round.ctx, volumeID)

		ms.mu.Lock()
		q.next = nil
		settling := ms.unsettled[volumeID]
		var now, later []*modifyRequest
		var refused []refusal
		var opts cloud.ModifyOptions
		if err == nil {
			opts, now, later, refused = merge(d, round.reqs)
			for _, r := range later {
				ms.join(q, r)
			}
		}
		ms.mu.Unlock()

		if err != nil {
			round.finish(round.reqs, modifyResult{err: err})
			round.cancel()
			continue
		}
		for _, r := range refused {
			round.finish([]*modifyRequest{r.req}, modifyResult{err: r.err})
		}
		if len(later) > 0 {
			klog.V(4).InfoS("Modifications conflict; the later ones go next", "volumeID", volumeID, "now", len(now), "later", len(later))
		}
		q.state.Store("")
		m, err := ms.c.modify(round.ctx, d, opts, settling, func(s string) { q.state.Store(s) })
		ms.mu.Lock()
		switch {
		case err == nil && m.State != cloud.ModificationCompleted:
			ms.unsettled[volumeID] = true
		case err == nil:
			delete(ms.unsettled, volumeID)
		}
		ms.mu.Unlock()
		round.finish(now, modifyResult{m: m, err: err})
		round.cancel()
	}
}

// finish answers reqs.
func (r *modifyRound) finish(reqs []*modifyRequest, res modifyResult) {
	for _, req := range reqs {
		req.done <- res
	}
}

// refusal is a request merge turned away, with its answer.
type refusal struct {
	req *modifyRequest
	err error
}

// merge folds the requests of a round into the targets of one modification of d: the largest size, and the
// type, IOPS and throughput asked for. A request asking a different value of something an earlier one set
// goes to the next round (later); a ResizeDisk to a size d already has asks nothing; a ModifyDisk to a
// smaller size, and a size the target type does not allow, are refused.
func merge(d *cloud.Disk, reqs []*modifyRequest) (opts cloud.ModifyOptions, now, later []*modifyRequest, refused []refusal) {
	for _, r := range reqs {
		o := r.opts
		switch {
		case r.grow && o.SizeGiB <= d.SizeGiB:
			o.SizeGiB = 0
		case o.SizeGiB > 0 && o.SizeGiB < d.SizeGiB:
			refused = append(refused, refusal{r, newError("modify disk", cloud.ErrInvalidArgument,
				"volume %s is %d GiB; it cannot shrink", d.ID, d.SizeGiB)})
			continue
		}
		if o.SizeGiB > 0 {
			if err := volumetypes.CheckSize(cmp.Or(o.VolumeType, d.VolumeType), o.SizeGiB); err != nil {
				refused = append(refused, refusal{r, newError("modify disk", cloud.ErrOutOfRange, "volume %s: %v", d.ID, err)})
				continue
			}
		}
		if conflicts(opts.VolumeType, o.VolumeType) || conflicts(opts.IOPS, o.IOPS) || conflicts(opts.Throughput, o.Throughput) {
			later = append(later, r)
			continue
		}
		now = append(now, r)
		opts.SizeGiB = max(opts.SizeGiB, o.SizeGiB)
		opts.VolumeType = cmp.Or(opts.VolumeType, o.VolumeType)
		opts.IOPS = cmp.Or(opts.IOPS, o.IOPS)
		opts.Throughput = cmp.Or(opts.Throughput, o.Throughput)
	}
	return opts, now, later, refused
}

func conflicts[T comparable](have, want T) bool {
	var zero T
	return have != zero && want != zero && have != want
}
