package ec2cloud

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricDetachPending is the age of each detach the controller is waiting for.
const metricDetachPending = "diskforge_cloud_detach_pending_seconds"

// detachForget is how long a detach whose wait ended with its caller's deadline stays reported without a wait
// on it: the external-attacher calls again until the detach is done, and its next wait carries on from the
// first one's start; a detach nobody calls for again (its VolumeAttachment deleted) is dropped after this.
const detachForget = 10 * time.Minute

// detachPending reports, at scrape time, how long each detach has been pending: from the first wait for it,
// across the caller's retries, until a wait sees it done or failed. A stuck detach (a device the node does not
// let go of) shows as a series that keeps growing, per volume and instance.
type detachPending struct {
	desc *prometheus.Desc
	now  func() time.Time

	mu      sync.Mutex
	pending map[detachKey]*detachEntry
}

type detachKey struct{ volumeID, instanceID string }

type detachEntry struct {
	since time.Time
	// waits is how many waits run for it now; abandoned is when the last one gave up on its deadline.
	waits     int
	abandoned time.Time
}

func newDetachPending(now func() time.Time) *detachPending {
	return &detachPending{now: now, pending: map[detachKey]*detachEntry{},
		desc: prometheus.NewDesc(metricDetachPending,
			"How long a detach has been pending (from the first wait for it, across retries), per volume and instance, while it is.",
			[]string{"volume_id", "instance_id"}, nil)}
}

// start records that a wait for the detach begins, and returns its end: done says whether the detach is over
// (detached, or failed for good), false when the wait gave up on its caller's deadline.
func (d *detachPending) start(volumeID, instanceID string) (end func(done bool)) {
	k := detachKey{volumeID, instanceID}
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.pending[k]
	if e == nil || e.waits == 0 && d.now().Sub(e.abandoned) > detachForget {
		e = &detachEntry{since: d.now()}
		d.pending[k] = e
	}
	e.waits++
	return func(done bool) {
		d.mu.Lock()
		defer d.mu.Unlock()
		e.waits--
		switch {
		case done:
			if d.pending[k] == e {
				delete(d.pending, k)
			}
		case e.waits == 0:
			e.abandoned = d.now()
		}
	}
}

func (d *detachPending) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *detachPending) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for k, e := range d.pending {
		if e.waits == 0 && now.Sub(e.abandoned) > detachForget {
			delete(d.pending, k)
			continue
		}
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, now.Sub(e.since).Seconds(), k.volumeID, k.instanceID)
	}
}
